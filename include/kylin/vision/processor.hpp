// The Qwen3.5 image processor: an RGB image -> the vision tower's pixel_values and grid_thw, as HF's
// Qwen2VLImageProcessorFast computes them on a CPU (smart_resize, torch's uint8 bicubic, the fused
// rescale + normalise in float32, the frame repeated to temporal_patch_size, merge-block patch order).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/core/json.hpp"
#include "kylin/io/checkpoint.hpp"  // io::read_text_file
#include "kylin/vision/image.hpp"
#include "kylin/vision/resize.hpp"

namespace kylin::vision {

struct ProcessorConfig {  // preprocessor_config.json (Qwen2VLImageProcessor lineage)
  std::int64_t patch_size = 16, temporal_patch_size = 2, merge_size = 2;
  std::int64_t min_pixels = 56 * 56, max_pixels = 28 * 28 * 1280;  // size.shortest_edge / size.longest_edge, or the legacy min_pixels / max_pixels keys
  std::array<double, 3> image_mean{0.5, 0.5, 0.5}, image_std{0.5, 0.5, 0.5};

  std::int64_t factor() const { return patch_size * merge_size; }  // both resized sides are multiples of it
  std::int64_t patch_dim() const { return 3 * temporal_patch_size * patch_size * patch_size; }

  // What the released Qwen/Qwen3.5-* (and Qwen3.6) repos ship, which tests/data/models/tiny-qwen35-vl copies:
  // size {shortest_edge 65536, longest_edge 16777216}, patch 16, temporal 2, merge 2, mean = std = 0.5.
  static ProcessorConfig qwen35() {
    ProcessorConfig c;
    c.min_pixels = 65536;
    c.max_pixels = 16777216;
    return c;
  }
  // Reads model_dir/preprocessor_config.json; without the file, qwen35() (kylin runs Qwen3.5 checkpoints,
  // and a copy missing only this file is the likely case). Throws ErrorCategory::config on bad values.
  static ProcessorConfig from_dir(const std::filesystem::path& model_dir);
};

struct GridTHW {  // in patches
  std::int64_t t = 1, h = 0, w = 0;
  std::int64_t patches() const { return t * h * w; }
};
struct ResizedSize {
  std::int64_t width = 0, height = 0;
};

namespace processor_detail {

// Python's round(): half to even (round(1.5) = 2, round(2.5) = 2). x - floor(x) is exact here.
inline double round_half_even(double x) {
  const double f = std::floor(x), d = x - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return std::fmod(f, 2.0) == 0.0 ? f : f + 1;
}

[[noreturn]] inline void bad_image(const std::string& why) { throw Error(ErrorCategory::request, "image", why); }

}  // namespace processor_detail

// transformers models/qwen2_vl/image_processing_qwen2_vl.py smart_resize(height, width, factor, min_pixels,
// max_pixels), factor = patch * merge: each side rounded (half to even) to a multiple of the factor; over
// max_pixels both shrink by sqrt(hw / max) and floor (at least one factor); under min_pixels both grow by
// sqrt(min / hw) and ceil. Python's int / int is a correctly rounded double division, as here (h*w < 2^53).
inline ResizedSize smart_resize(std::int64_t height, std::int64_t width, const ProcessorConfig& c) {
  using processor_detail::bad_image;
  const std::string size = std::to_string(width) + "x" + std::to_string(height);
  if (height <= 0 || width <= 0) bad_image("a " + size + " image has no pixels");
  if (height > (std::int64_t{1} << 24) || width > (std::int64_t{1} << 24)) bad_image("a " + size + " image is too large");
  const double h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(c.factor());
  if (std::max(h, w) / std::min(h, w) > 200)
    bad_image("absolute aspect ratio must be smaller than 200, got " + size + " (width x height)");
  auto h_bar = static_cast<std::int64_t>(processor_detail::round_half_even(h / f)) * c.factor();
  auto w_bar = static_cast<std::int64_t>(processor_detail::round_half_even(w / f)) * c.factor();
  const double hw = static_cast<double>(height * width);
  if (h_bar * w_bar > c.max_pixels) {
    const double beta = std::sqrt(hw / static_cast<double>(c.max_pixels));
    h_bar = std::max(c.factor(), static_cast<std::int64_t>(std::floor(h / beta / f)) * c.factor());
    w_bar = std::max(c.factor(), static_cast<std::int64_t>(std::floor(w / beta / f)) * c.factor());
  } else if (h_bar * w_bar < c.min_pixels) {
    const double beta = std::sqrt(static_cast<double>(c.min_pixels) / hw);
    h_bar = static_cast<std::int64_t>(std::ceil(h * beta / f)) * c.factor();
    w_bar = static_cast<std::int64_t>(std::ceil(w * beta / f)) * c.factor();
  }
  if (h_bar <= 0 || w_bar <= 0) bad_image("a " + size + " image resizes to no pixels (min_pixels " + std::to_string(c.min_pixels) + ")");
  return {w_bar, h_bar};
}

struct PixelValues {
  GridTHW grid;
  std::int64_t patch_dim = 0;  // 3 * temporal_patch_size * patch_size^2 (1536 for Qwen3.5)
  std::vector<float> values;   // [grid.t*grid.h*grid.w, patch_dim] in merge-block order
};

namespace processor_detail {

// HF's fused rescale + normalise (image_processing_utils_fast.py _fuse_mean_std_and_rescale_factor):
// mean and std become float32 tensors times 1 / rescale_factor (255), then torchvision's normalize runs
// (x - mean) / std in float32. For mean = std = 0.5: (x - 127.5) / 127.5. One value per channel and byte.
inline std::array<std::array<float, 256>, 3> normalise_table(const ProcessorConfig& c) {
  std::array<std::array<float, 256>, 3> t{};  // [channel][byte]
  for (int ch = 0; ch < 3; ++ch) {
    const float mean = static_cast<float>(c.image_mean[static_cast<std::size_t>(ch)]) * 255.0f;
    const float stdev = static_cast<float>(c.image_std[static_cast<std::size_t>(ch)]) * 255.0f;
    for (int x = 0; x < 256; ++x) {
      const float centred = static_cast<float>(x) - mean;
      t[static_cast<std::size_t>(ch)][static_cast<std::size_t>(x)] = centred / stdev;
    }
  }
  return t;
}

}  // namespace processor_detail

// An image already at its processor size (both sides multiples of patch * merge) -> pixel_values. HF's
// view(t, T, C, h/m, m, P, w/m, m, P).permute(0, 3, 6, 4, 7, 2, 1, 5, 8): rows run over merge blocks
// (block row, block column, then the m x m patches inside), each row is (channel, frame, P rows, P cols);
// the single image is repeated to fill the T frames.
inline PixelValues patchify(const Image& img, const ProcessorConfig& c) {
  const std::int64_t p = c.patch_size, m = c.merge_size, frames = c.temporal_patch_size;
  if (img.width <= 0 || img.height <= 0 || img.width % c.factor() != 0 || img.height % c.factor() != 0 ||
      img.rgb.size() != static_cast<std::size_t>(img.width * img.height * 3))
    processor_detail::bad_image("a " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                                " image is not a multiple of " + std::to_string(c.factor()) + " pixels per side");
  PixelValues out;
  out.grid = {1, img.height / p, img.width / p};
  out.patch_dim = c.patch_dim();
  out.values.resize(static_cast<std::size_t>(out.grid.patches() * out.patch_dim));
  const auto table = processor_detail::normalise_table(c);
  const std::int64_t plane = p * p;  // one channel of one frame of a patch: [P][P]
  std::int64_t row = 0;
  for (std::int64_t by = 0; by < out.grid.h / m; ++by)
    for (std::int64_t bx = 0; bx < out.grid.w / m; ++bx)
      for (std::int64_t my = 0; my < m; ++my)
        for (std::int64_t mx = 0; mx < m; ++mx, ++row) {
          float* dst = out.values.data() + row * out.patch_dim;  // [3][frames][P][P]
          const std::int64_t y0 = (by * m + my) * p, x0 = (bx * m + mx) * p;
          for (int ch = 0; ch < 3; ++ch) {
            float* first = dst + ch * frames * plane;  // frame 0 of this channel
            for (std::int64_t y = 0; y < p; ++y)
              for (std::int64_t x = 0; x < p; ++x)
                first[y * p + x] = table[static_cast<std::size_t>(ch)][img.at(y0 + y, x0 + x, ch)];
            for (std::int64_t t = 1; t < frames; ++t) std::copy(first, first + plane, first + t * plane);
          }
        }
  return out;
}

namespace processor_detail {

// A field of preprocessor_config.json; errors name "<file>: <field>".
struct ConfigFields {
  const json::Value& root;
  std::string file;

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw Error(ErrorCategory::config, field.empty() ? file : file + ": " + field, why);
  }
  std::int64_t integer(const json::Value* v, const std::string& field, std::int64_t lo, std::int64_t hi) const {
    if (!v->is_int() || v->as_int() < lo || v->as_int() > hi)
      fail(field, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + json::dump(*v));
    return v->as_int();
  }
  // image_mean / image_std: three numbers, or one for every channel (HF takes both).
  void channels(const char* field, std::array<double, 3>& out, bool nonzero) const {
    const json::Value* v = root.find(field);
    if (!v) return;
    const bool one = v->is_number(), three = v->is_array() && v->size() == 3;
    for (std::size_t ch = 0; ch < 3 && (one || three); ++ch) {
      const json::Value& e = one ? *v : v->as_array()[ch];
      if (!e.is_number() || !std::isfinite(e.as_double()) || (nonzero && e.as_double() == 0.0)) break;
      out[ch] = e.as_double();
      if (ch == 2) return;
    }
    fail(field, std::string("expected 3 finite numbers") + (nonzero ? " (not 0)" : "") + ", got " + json::dump(*v));
  }
  // The steps kylin always runs must not be switched off or changed (resample 3 = PIL BICUBIC).
  void fixed(const char* field, const json::Value& expected) const {
    const json::Value* v = root.find(field);
    const bool same = !v || (v->is_number() && expected.is_number() ? std::abs(v->as_double() - expected.as_double()) < 1e-12
                                                                    : *v == expected);
    if (!same) fail(field, "kylin supports only " + json::dump(expected) + ", got " + json::dump(*v));
  }
};

}  // namespace processor_detail

// Keys the file lacks take Qwen2VLImageProcessorFast's class defaults, as HF gives them (patch 14, the
// OpenAI CLIP mean/std, size 56*56 .. 28*28*1280); top-level min_pixels / max_pixels override size (its
// __init__'s backward compatibility), and size then needs both shortest_edge and longest_edge.
inline ProcessorConfig ProcessorConfig::from_dir(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "preprocessor_config.json";
  if (!std::filesystem::exists(path)) return qwen35();
  const json::Value root = json::parse(io::read_text_file(path), path.string(), ErrorCategory::config);
  const processor_detail::ConfigFields in{root, path.string()};
  if (!root.is_object()) in.fail("", "expected a JSON object");
  ProcessorConfig c;
  c.patch_size = 14;
  c.image_mean = {0.48145466, 0.4578275, 0.40821073};
  c.image_std = {0.26862954, 0.26130258, 0.27577711};
  if (const auto* v = root.find("patch_size")) c.patch_size = in.integer(v, "patch_size", 1, 1024);
  if (const auto* v = root.find("temporal_patch_size")) c.temporal_patch_size = in.integer(v, "temporal_patch_size", 1, 64);
  if (const auto* v = root.find("merge_size")) c.merge_size = in.integer(v, "merge_size", 1, 64);
  constexpr std::int64_t most = std::int64_t{1} << 40;
  bool has_min = true, has_max = true;
  if (const auto* size = root.find("size"); size && !size->is_null()) {
    if (!size->is_object()) in.fail("size", "expected an object with shortest_edge and longest_edge");
    const auto* lo = size->find("shortest_edge");
    const auto* hi = size->find("longest_edge");
    has_min = lo != nullptr, has_max = hi != nullptr;
    if (lo) c.min_pixels = in.integer(lo, "size.shortest_edge", 0, most);
    if (hi) c.max_pixels = in.integer(hi, "size.longest_edge", 1, most);
  }
  if (const auto* v = root.find("min_pixels"); v && !v->is_null()) c.min_pixels = in.integer(v, "min_pixels", 0, most), has_min = true;
  if (const auto* v = root.find("max_pixels"); v && !v->is_null()) c.max_pixels = in.integer(v, "max_pixels", 1, most), has_max = true;
  if (!has_min || !has_max) in.fail("size", "must contain shortest_edge and longest_edge");
  in.channels("image_mean", c.image_mean, false);
  in.channels("image_std", c.image_std, true);
  in.fixed("do_resize", true);
  in.fixed("do_rescale", true);
  in.fixed("do_normalize", true);
  in.fixed("rescale_factor", 1.0 / 255);
  in.fixed("resample", 3);
  return c;
}

// resize + normalise + patchify: what Qwen2VLImageProcessorFast returns for one image
// (pixel_values [t*h*w, patch_dim], image_grid_thw).
inline PixelValues preprocess(const Image& image, const ProcessorConfig& c) {
  const ResizedSize size = smart_resize(image.height, image.width, c);
  return patchify(resize_bicubic(image, size.width, size.height), c);
}

}  // namespace kylin::vision
