// Prompts with images through a Session (GenerateOptions::images) on the full-vocabulary Qwen3.5 test model with
// its tiny vision tower: the greedy tokens of the model's own forward loop, and the prefix reuse of the image keys.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "common/reference.hpp"
#include "kylin/kylin.hpp"
#include "kylin/vision/tower.hpp"

namespace session_images_test {

using namespace kylin;
const std::string dir = test::data + "/models/e2e-qwen35-fullvocab";

vision::Image gradient(std::int64_t w, std::int64_t h, int shift) {
  vision::Image img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w * h * 3))};
  for (std::int64_t i = 0; i < w * h * 3; ++i) img.rgb[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>((i * 7 + shift) % 256);
  return img;
}

// "<|vision_start|>" + the image's keys + "<|vision_end|>" inside a chat turn, and its image rows.
struct ImagePrompt {
  vision::ImageEmbedding image;
  std::vector<int> tokens;
  std::vector<ImageRows> rows;
};
ImagePrompt image_prompt(Engine& e, const vision::Image& img) {
  ImagePrompt p{e.model().encode_image(vision::preprocess(img, vision::ProcessorConfig::from_dir(dir))), {}, {}};
  p.tokens = e.tokenizer().encode("<|im_start|>user\n<|vision_start|>");
  const auto row = static_cast<std::int64_t>(p.tokens.size());
  for (std::int64_t i = 0; i < p.image.tokens(); ++i) p.tokens.push_back(image_token_key(p.image.hash, i));
  for (int id : e.tokenizer().encode("<|vision_end|>What is this?<|im_end|>\n<|im_start|>assistant\n")) p.tokens.push_back(id);
  p.rows = {{row, 0, p.image.tokens(), p.image.grid_h, p.image.grid_w, p.image.embeds}};
  return p;
}

TEST_CASE("session: an image prompt decodes as the model's own loop, and reuses its prefix only for the same image") {
  auto engine = Engine::load(dir, {.threads = 2});
  REQUIRE(engine->model().has_vision());
  ImagePrompt p = image_prompt(*engine, gradient(64, 64, 0));
  CHECK(p.image.tokens() == 64);  // 64x64 upscaled to 256x256 (min_pixels 65536): 16x16 patches, 8x8 tokens
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.ignore_eos = true;
  o.sampling.greedy = true;
  o.images = p.rows;
  Session s(*engine, 512);
  const Generation g = s.generate(p.tokens, o);
  // the oracle: the model alone, the prompt whole, then argmax steps
  KVCache cache = engine->model().new_cache(512);
  std::vector<float> logits(static_cast<std::size_t>(engine->model().vocab_size()));
  const SequenceInput in{p.tokens, cache, {.logits = logits}, false, {}, {}, p.rows};
  engine->model().forward(std::span<const SequenceInput>(&in, 1));
  std::vector<int> want;
  for (int i = 0; i < 6; ++i) {
    want.push_back(static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    engine->model().forward(std::span<const int>(&want.back(), 1), cache, logits);
  }
  CHECK(g.tokens == want);
  // the same prompt again reuses the image; another image at the same place shares nothing past its first token
  const Generation again = s.generate(p.tokens, o);
  CHECK(again.tokens == want);
  CHECK(again.stats.cached_tokens > p.rows[0].row + p.rows[0].count);
  ImagePrompt other = image_prompt(*engine, gradient(64, 64, 1));
  o.images = other.rows;
  const Generation g2 = s.generate(other.tokens, o);
  CHECK(g2.stats.cached_tokens <= other.rows[0].row);
  // a session holding image tokens is not saved (a KV file keeps no image positions)
  const auto path = std::filesystem::temp_directory_path() / "kylin-session-images-test.kv";
  CHECK_THROWS_WITH_AS(s.save(path), doctest::Contains("image tokens"), Error);
  CHECK_FALSE(std::filesystem::exists(path));
  // image rows without their images are refused, naming the field
  o.images = {};
  CHECK_THROWS_WITH_AS(s.generate(p.tokens, o), doctest::Contains("tokens"), Error);
}

}  // namespace session_images_test
