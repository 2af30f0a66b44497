// Chat prompts with images (generate/chat_images.hpp) against the float64 reference of HF's Qwen3.5 processor and
// model (tests/data/reference/tiny-qwen35-vl.json): the official template's text, the pads expanded to HF's
// input_ids, the encoded prompt's logits; then Session::chat with image parts on the full-vocabulary model.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/process.hpp"
#include "common/reference.hpp"
#include "kylin/io/image_decode.hpp"
#include "kylin/kylin.hpp"

namespace chat_images_test {

using namespace kylin;
const std::string vl_dir = test::data + "/models/tiny-qwen35-vl";

const json::Value& reference() {
  static const json::Value ref = json::parse(io::read_text_file(test::data + "/reference/tiny-qwen35-vl.json"));
  return ref;
}
std::vector<int> ints(const json::Value& v) {
  std::vector<int> out;
  for (const auto& x : v.as_array()) out.push_back(static_cast<int>(x.as_int()));
  return out;
}
vision::Image png(const std::string& file) {
  const std::string bytes = io::read_text_file(test::data + "/" + file);
  return io::decode_image(std::span(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), file);
}
std::vector<vision::Image> case_images(const json::Value& c) {
  std::vector<vision::Image> out;
  for (const auto& im : c.find("images")->as_array()) out.push_back(png(im.find("file")->as_string()));
  return out;
}

TEST_CASE("chat images: the official template's prompt, and its pads expanded to HF's input_ids") {
  const ChatTemplate tmpl(io::read_text_file(test::data + "/qwen35-tokenizer/chat_template.jinja"));
  const vision::ProcessorConfig pc = vision::ProcessorConfig::from_dir(vl_dir);
  const int pad = static_cast<int>(reference().find("model_config")->find("image_token_id")->as_int());
  for (const auto& c : reference().find("cases")->as_array()) {
    CAPTURE(c.find("name")->as_string());
    RenderOptions generation;
    generation.add_generation_prompt = true;
    CHECK(tmpl.render(*c.find("messages"), generation) == c.find("prompt_text")->as_string());
    std::vector<ImageTokens> sizes;
    for (const auto& im : c.find("images")->as_array()) sizes.push_back(image_tokens(im.find("width")->as_int(), im.find("height")->as_int(), pc));
    for (std::size_t i = 0; i < sizes.size(); ++i) CHECK(sizes[i].count() == c.find("image_pad_counts")->as_array()[i].as_int());
    const ExpandedIds e = expand_image_pads(ints(*c.find("tokens_unexpanded")), pad, sizes);
    CHECK(e.ids == ints(*c.find("tokens")));
    CHECK(e.rows.size() == sizes.size());
    for (std::size_t i = 0; i < e.rows.size(); ++i) CHECK(e.ids[static_cast<std::size_t>(e.rows[i]) - 1] == 488);  // <|vision_start|>
    // one image more or fewer than the prompt's pads
    sizes.push_back({2, 2});
    CHECK_THROWS_WITH_AS(expand_image_pads(ints(*c.find("tokens_unexpanded")), pad, sizes), doctest::Contains("messages"), Error);
    sizes.resize(sizes.size() - 2);
    CHECK_THROWS_WITH_AS(expand_image_pads(ints(*c.find("tokens_unexpanded")), pad, sizes, "messages[0]"),
                         doctest::Contains("image placeholders"), Error);
  }
}

TEST_CASE("chat images: a prompt encoded with its decoded images gives the reference's logits and greedy tokens") {
  Model model = Model::load(vl_dir, {.threads = 2});
  const vision::ProcessorConfig pc = vision::ProcessorConfig::from_dir(vl_dir);
  const int pad = static_cast<int>(reference().find("model_config")->find("image_token_id")->as_int());
  for (const auto& c : reference().find("cases")->as_array()) {
    CAPTURE(c.find("name")->as_string());
    const std::vector<vision::Image> images = case_images(c);
    const ImagePrompt p = encode_prompt_images(model, ints(*c.find("tokens_unexpanded")), pad, images, pc);
    const std::vector<int> hf = ints(*c.find("tokens"));
    REQUIRE(p.ids.size() == hf.size());
    for (std::size_t t = 0; t < hf.size(); ++t) CHECK((hf[t] == pad ? p.ids[t] < 0 : p.ids[t] == hf[t]));
    CHECK(p.image_tokens == std::count(hf.begin(), hf.end(), pad));
    KVCache cache = model.new_cache(256);
    std::vector<float> logits(static_cast<std::size_t>(model.vocab_size()));
    const SequenceInput in{p.ids, cache, {.logits = logits}, false, {}, {}, p.rows};
    model.forward(std::span<const SequenceInput>(&in, 1));
    std::vector<float> ref;
    for (const auto& x : c.find("logits_last")->as_array()) ref.push_back(static_cast<float>(x.as_double()));
    CHECK(test::relative_l2(logits, ref) < 2e-5);  // the bar of tests/vision/tower_test.cpp, which says why
    std::vector<int> greedy;
    for (std::size_t i = 0; i < c.find("greedy")->as_array().size(); ++i) {
      greedy.push_back(static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      model.forward(std::span<const int>(&greedy.back(), 1), cache, logits);
    }
    CHECK(greedy == ints(*c.find("greedy")));
  }
  // a model without a tower refuses images before any work, naming the field
  Model text = Model::load(test::data + "/models/tiny-qwen3-untied", {.threads = 1});
  CHECK_THROWS_WITH_AS(encode_prompt_images(text, std::vector<int>{1, pad, 2}, pad, case_images(reference().find("cases")->as_array()[0]), pc),
                       doctest::Contains("no vision tower"), Error);
}

vision::Image gradient(std::int64_t w, std::int64_t h, int shift) {
  vision::Image img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w * h * 3))};
  for (std::int64_t i = 0; i < w * h * 3; ++i) img.rgb[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>((i * 5 + shift) % 256);
  return img;
}

TEST_CASE("session: chat messages with image parts generate as their prompt built by hand") {
  const std::string dir = test::data + "/models/e2e-qwen35-fullvocab";
  auto engine = Engine::load(dir, {.threads = 2});
  REQUIRE(engine->has_vision());
  const json::Value messages = json::parse(R"([{"role": "user", "content": [
      {"type": "text", "text": "Look:"}, {"type": "image"}, {"type": "text", "text": "and"}, {"type": "image_url", "image_url": {"url": "x"}},
      {"type": "text", "text": "What differs?"}]}])");
  const std::vector<vision::Image> images{gradient(64, 64, 0), gradient(96, 40, 3)};
  GenerateOptions o;
  o.max_new_tokens = 5;
  o.ignore_eos = true;
  o.sampling.greedy = true;
  Session s(*engine, 1024);
  const Generation g = s.chat(messages, {}, o, images);
  // by hand: the template's text cut at its pads, each image's keys between, the tower's rows placed there
  const std::string text = s.render_chat(messages, {});
  const std::string pad = "<|image_pad|>";
  std::vector<int> ids;
  std::vector<vision::ImageEmbedding> embeds;
  std::vector<ImageRows> rows;
  std::size_t from = 0;
  for (const vision::Image& img : images) {
    const std::size_t at = text.find(pad, from);
    REQUIRE(at != std::string::npos);
    for (int id : engine->tokenizer().encode(text.substr(from, at - from))) ids.push_back(id);
    embeds.push_back(engine->model().encode_image(vision::preprocess(img, engine->image_processor())));
    rows.push_back({static_cast<std::int64_t>(ids.size()), 0, embeds.back().tokens(), embeds.back().grid_h, embeds.back().grid_w, embeds.back().embeds});
    for (std::int64_t i = 0; i < embeds.back().tokens(); ++i) ids.push_back(image_token_key(embeds.back().hash, i));
    from = at + pad.size();
  }
  for (int id : engine->tokenizer().encode(text.substr(from))) ids.push_back(id);
  o.images = rows;
  Session oracle(*engine, 1024);
  CHECK(g.tokens == oracle.generate(ids, o, Channel::reasoning).tokens);
  CHECK(g.stats.prompt_tokens == static_cast<std::int64_t>(ids.size()));
  // an image part without its image, an image without its part; a model's images in text-only chat
  o.images = {};
  CHECK_THROWS_WITH_AS(s.chat(messages, {}, o, std::span(images).first(1)), doctest::Contains("2 image placeholders for 1 images"), Error);
  CHECK_THROWS_WITH_AS(s.chat(messages, {}, o), doctest::Contains("image placeholders"), Error);
  const json::Value text_only = json::parse(R"([{"role": "user", "content": "hi"}])");
  CHECK_THROWS_WITH_AS(s.chat(text_only, {}, o, images), doctest::Contains("0 image placeholders for 2 images"), Error);
  // the pixel bounds come from EngineOptions over the processor config
  auto small = Engine::load(dir, {.threads = 1, .image_min_pixels = 32 * 32, .image_max_pixels = 64 * 64});
  CHECK(image_tokens(512, 512, small->image_processor()).count() == 4);
  CHECK_THROWS_WITH_AS(Engine::load(dir, {.threads = 1, .image_min_pixels = 4096, .image_max_pixels = 1024}), doctest::Contains("max_pixels"), Error);
}

}  // namespace chat_images_test

namespace chat_images_test {

TEST_CASE("kylin run --image and kylin chat's /image answer as Session::chat does with the decoded image") {
  const std::string dir = test::data + "/models/e2e-qwen35-fullvocab", img = test::data + "/images/a_64x48.png";
  const std::string flags = " --greedy --no-think -n 6 -t 2";
  const auto r = test::run_shell(test::kylin_bin + " run --model " + dir + " --image " + img + " -p 'What is it?'" + flags + " 2>/dev/null");
  REQUIRE(r.exit_code == 0);
  auto engine = Engine::load(dir, {.threads = 2});
  const json::Value messages = json::parse(R"([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}])");
  GenerateOptions o;
  o.max_new_tokens = 6;
  o.sampling.greedy = true;
  Session s(*engine);
  const Generation g = s.chat(messages, {.enable_thinking = false, .tools = {}, .extra_kwargs = {}}, o, std::vector<vision::Image>{png("images/a_64x48.png")});
  CHECK(r.out == g.content + "\n");
  const auto chat = test::run_shell("printf '/image " + img + "\\nWhat is it?\\n/quit\\n' | " + test::kylin_bin + " chat --model " + dir + flags + " 2>/dev/null");
  CHECK(chat.exit_code == 0);
  CHECK(chat.out == r.out);
  // a missing file, a model without a tower: one line naming what is wrong
  const auto missing = test::run_shell(test::kylin_bin + " run --model " + dir + " --image /nonexistent.png -p hi" + flags + " 2>&1");
  CHECK(missing.exit_code != 0);
  CHECK(missing.out.find("/nonexistent.png") != std::string::npos);
  const auto text = test::run_shell(test::kylin_bin + " run --model " + test::data + "/models/e2e-qwen3-chat --image " + img + " -p hi" + flags + " 2>&1");
  CHECK(text.exit_code != 0);
  CHECK(text.out.find("no vision tower") != std::string::npos);
}

}  // namespace chat_images_test
