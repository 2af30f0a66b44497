// Images in a chat prompt: the template's one <|image_pad|> per image part expanded to the image's tokens, as
// transformers' Qwen3VLProcessor expands the text (grid_t*grid_h*grid_w / merge_size^2 pads), and for the model
// those tokens made image keys fed the vision tower's embeddings (model/image_rows.hpp).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/model/image_rows.hpp"
#include "kylin/model/model.hpp"
#include "kylin/vision/processor.hpp"
#include "kylin/vision/tower.hpp"

namespace kylin {

// An image's size in text tokens once the processor has resized it (smart_resize): no pixels are needed.
struct ImageTokens {
  std::int64_t grid_h = 0, grid_w = 0;  // patches / merge_size per side
  std::int64_t count() const { return grid_h * grid_w; }
};

inline ImageTokens image_tokens(std::int64_t width, std::int64_t height, const vision::ProcessorConfig& c) {
  const vision::ResizedSize s = vision::smart_resize(height, width, c);
  return {s.height / c.factor(), s.width / c.factor()};
}

// A rendered prompt's ids with each image's one pad repeated to its tokens: transformers' input_ids.
struct ExpandedIds {
  std::vector<int> ids;             // [tokens]
  std::vector<std::int64_t> rows;   // [images] where each image's tokens start in ids
  std::int64_t image_tokens = 0;    // of all images
};

// `ids` hold one `pad_id` per image, in the order of `images`; another count is a request error naming
// `field` (an image part the template dropped, or a pad spelled in the text under ContentTokens::special).
inline ExpandedIds expand_image_pads(std::span<const int> ids, int pad_id, std::span<const ImageTokens> images,
                                     const std::string& field = "messages") {
  std::size_t pads = 0;
  for (int id : ids) pads += id == pad_id;
  if (pads != images.size())
    throw Error(ErrorCategory::request, field, "the rendered prompt has " + std::to_string(pads) + " image placeholders for " +
                                                   std::to_string(images.size()) + " images");
  ExpandedIds out;
  auto image = images.begin();
  for (int id : ids) {
    if (id != pad_id) {
      out.ids.push_back(id);
      continue;
    }
    out.rows.push_back(static_cast<std::int64_t>(out.ids.size()));
    out.ids.insert(out.ids.end(), static_cast<std::size_t>(image->count()), pad_id);
    out.image_tokens += image->count();
    ++image;
  }
  return out;
}

// A prompt with its images ready for the model: ids whose image tokens are image keys, the tower's embeddings,
// and the rows that place them (GenerateOptions::images). Move-only: rows point into embeddings.
struct ImagePrompt {
  std::vector<int> ids;                            // [tokens]
  std::vector<vision::ImageEmbedding> embeddings;  // [images] in prompt order
  std::vector<ImageRows> rows;                     // [images]
  std::int64_t image_tokens = 0;

  ImagePrompt() = default;
  ImagePrompt(ImagePrompt&&) = default;
  ImagePrompt& operator=(ImagePrompt&&) = default;
  ImagePrompt(const ImagePrompt&) = delete;
  ImagePrompt& operator=(const ImagePrompt&) = delete;
};

// Preprocesses and encodes each image (Model::encode_image, one at a time across threads) and expands `ids`,
// a rendered prompt with one `pad_id` per image.
inline ImagePrompt encode_prompt_images(Model& model, std::span<const int> ids, int pad_id, std::span<const vision::Image> images,
                                        const vision::ProcessorConfig& c, const std::string& field = "messages") {
  if (!images.empty() && !model.has_vision())
    throw Error(ErrorCategory::request, field, "this model has no vision tower (vision_config): it takes no images");
  std::vector<ImageTokens> sizes;  // [images]
  for (const vision::Image& img : images) sizes.push_back(image_tokens(img.width, img.height, c));
  ExpandedIds expanded = expand_image_pads(ids, pad_id, sizes, field);  // before the tower: a bad count costs nothing
  ImagePrompt p;
  p.ids = std::move(expanded.ids);
  p.image_tokens = expanded.image_tokens;
  for (const vision::Image& img : images) p.embeddings.push_back(model.encode_image(vision::preprocess(img, c)));
  for (std::size_t i = 0; i < images.size(); ++i) {
    const vision::ImageEmbedding& e = p.embeddings[i];
    const std::int64_t row = expanded.rows[i];
    if (e.tokens() != sizes[i].count()) throw Error(ErrorCategory::runtime, "image tokens", "the tower's grid is not the processor's");
    for (std::int64_t t = 0; t < e.tokens(); ++t) p.ids[static_cast<std::size_t>(row + t)] = image_token_key(e.hash, t);
    p.rows.push_back({row, 0, e.tokens(), e.grid_h, e.grid_w, e.embeds});
  }
  return p;
}

}  // namespace kylin
