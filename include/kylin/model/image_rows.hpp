// Image tokens inside a sequence's input: rows whose embeddings come from the vision tower (vision/tower.hpp)
// instead of the token table, held in the KV cache as keys of their image's content, and placed by M-RoPE's
// three position rows (transformers Qwen3_5Model.get_rope_index).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/model/kv_cache.hpp"
#include "kylin/model/rope.hpp"

namespace kylin {

// An image's tokens among a sequence's new tokens: tokens [row, row + count) are its merged patches
// [index, index + count) (row-major over its grid_h x grid_w tokens); their embeddings, `embeds`, replace the
// token table's. index > 0 continues an image the cache holds the start of (a prompt fed in pieces).
struct ImageRows {
  std::int64_t row = 0, index = 0, count = 0;
  std::int64_t grid_h = 0, grid_w = 0;  // the image in text tokens (patches / spatial_merge_size per side)
  std::span<const float> embeds;        // [count, hidden]
};

// What a cache holds for an image's index-th token: a negative id from the image's content hash, so a prompt
// with another image shares no prefix past its first image token (a false match needs 31 bits to collide), and
// the same image at the same place is reused like text.
inline int image_token_key(std::uint64_t image_hash, std::int64_t index) {
  const std::uint64_t h = (image_hash ^ (static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
  return -1 - static_cast<int>((h ^ (h >> 31)) & 0x7FFFFFFFu);
}

// The three position rows of a sequence's n new tokens, and the position after each (KVCache::commit): text
// at s gets (s, s, s); image rows (s, s + r, s + c) for the image starting at s; after an image the text
// resumes one past the largest position so far (s + max(grid_h, grid_w)).
inline void image_positions(const KVCache& cache, std::int64_t n, std::span<const ImageRows> images, std::span<MRopePosition> pos,
                            std::span<std::int64_t> next_after) {
  std::int64_t next = cache.next_position(), base = 0;
  auto image = images.begin();
  for (std::int64_t t = 0; t < n; ++t) {
    while (image != images.end() && t >= image->row + image->count) ++image;
    const auto i = static_cast<std::size_t>(t);
    if (image != images.end() && t >= image->row) {
      const std::int64_t j = image->index + t - image->row, r = j / image->grid_w, c = j % image->grid_w;
      if (t == image->row) base = image->index == 0 ? next : cache.position_after(cache.size() - image->index);
      pos[i] = {base, base + r, base + c};
      next = std::max(next, base + std::max(r, c) + 1);
    } else {
      pos[i] = {next, next, next};
      ++next;
    }
    next_after[i] = next;
  }
}

// The images of tokens [from, from + n) of a sequence's input, their rows made relative to `from`, into `out`.
inline void clip_images(std::span<const ImageRows> images, std::int64_t from, std::int64_t n, std::int64_t hidden, std::vector<ImageRows>& out) {
  for (const ImageRows& im : images) {
    const std::int64_t a = std::max(im.row, from), b = std::min(im.row + im.count, from + n);
    if (a >= b) continue;
    out.push_back({a - from, im.index + a - im.row, b - a, im.grid_h, im.grid_w,
                   im.embeds.subspan(static_cast<std::size_t>((a - im.row) * hidden), static_cast<std::size_t>((b - a) * hidden))});
  }
}

// An input's images: in order, inside the tokens, each row an image key, an image continued only from the
// cache's last tokens, their embeddings [count, hidden]; and no negative id outside them. Throws naming the field.
inline void check_image_rows(std::span<const int> tokens, std::span<const ImageRows> images, const KVCache& cache, std::int64_t hidden,
                             bool has_tower, const std::string& where) {
  auto fail = [&](const std::string& m) { throw Error(ErrorCategory::request, "images", where + m); };
  if (!images.empty() && !has_tower) fail("this model has no vision tower (vision_config): it takes no images");
  std::int64_t end = 0;  // past the last image's rows
  const auto n = static_cast<std::int64_t>(tokens.size());
  for (const ImageRows& im : images) {
    if (im.row < end || im.count <= 0 || im.row + im.count > n || im.grid_h <= 0 || im.grid_w <= 0 || im.index < 0 ||
        im.index + im.count > im.grid_h * im.grid_w)
      fail("an image's rows must be in order, within the tokens and within its grid");
    if (im.index > 0 && (im.row != 0 || im.index > cache.size())) fail("an image continued from the cache must start the tokens");
    if (static_cast<std::int64_t>(im.embeds.size()) != im.count * hidden)
      fail(std::to_string(im.embeds.size()) + " embedding floats for " + std::to_string(im.count) + " tokens of hidden size " + std::to_string(hidden));
    for (std::int64_t t = im.row; t < im.row + im.count; ++t)
      if (tokens[static_cast<std::size_t>(t)] >= 0) fail("image rows must hold image keys (image_token_key), got id " + std::to_string(tokens[static_cast<std::size_t>(t)]));
    for (std::int64_t t = end; t < im.row; ++t)
      if (tokens[static_cast<std::size_t>(t)] < 0) fail("negative token id outside an image");
    end = im.row + im.count;
  }
  for (std::int64_t t = end; t < n && !images.empty(); ++t)
    if (tokens[static_cast<std::size_t>(t)] < 0) fail("negative token id outside an image");
}

}  // namespace kylin
