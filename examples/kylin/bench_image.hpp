// `kylin bench --image WxH`: one synthetic image of that size through the processor and the vision tower, the
// encode's median time and its GFLOP/s against the FMA peak the bench measured (vision_flops counts the work).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/core/json.hpp"
#include "kylin/model/model.hpp"
#include "kylin/vision/processor.hpp"
#include "kylin/vision/tower.hpp"

namespace kylin::cli {

struct ImageBenchResult {
  std::int64_t width = 0, height = 0;  // as given; the processor resizes it to grid * patch_size
  vision::GridTHW grid;
  std::int64_t tokens = 0;             // text tokens the image becomes
  double preprocess_ms = 0, encode_ms = 0, gflops = 0;
};

// "448x448" -> {448, 448}; anything else names the flag.
inline std::pair<std::int64_t, std::int64_t> parse_image_size(const std::string& s) {
  const auto x = s.find('x');
  auto number = [&](const std::string& t) {
    if (t.empty() || t.size() > 6 || t.find_first_not_of("0123456789") != std::string::npos)
      throw Error(ErrorCategory::request, "--image", "expected WIDTHxHEIGHT (e.g. 448x448), got '" + s + "'");
    return std::stoll(t);
  };
  if (x == std::string::npos) number("");
  return {number(s.substr(0, x)), number(s.substr(x + 1))};
}

// A smooth colour ramp with some texture: the tower's time does not depend on the pixels.
inline vision::Image bench_image(std::int64_t w, std::int64_t h) {
  vision::Image img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w * h * 3))};
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x)
      for (std::int64_t c = 0; c < 3; ++c)
        img.rgb[static_cast<std::size_t>((y * w + x) * 3 + c)] = static_cast<std::uint8_t>((x * (c + 1) + y * (3 - c) + (x * y) % 7) & 0xFF);
  return img;
}

inline ImageBenchResult image_bench(Model& model, const std::string& size, int reps) {
  using Clock = std::chrono::steady_clock;
  const VisionConfig* vc = model.vision_config();
  if (!model.has_vision() || !vc) throw Error(ErrorCategory::request, "--image", "the model has no vision tower (vision_config)");
  ImageBenchResult r;
  std::tie(r.width, r.height) = parse_image_size(size);
  const vision::Image img = bench_image(r.width, r.height);
  const vision::ProcessorConfig pc = vision::ProcessorConfig::from_dir(model.checkpoint().dir());
  auto t0 = Clock::now();
  const vision::PixelValues px = vision::preprocess(img, pc);
  r.preprocess_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  r.grid = px.grid;
  std::vector<double> ms;
  for (int i = 0; i < std::max(1, reps); ++i) {
    t0 = Clock::now();
    r.tokens = model.encode_image(px).tokens();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  r.encode_ms = ms[ms.size() / 2];
  r.gflops = vision::vision_flops(*vc, px.grid.patches()) / (r.encode_ms * 1e6);
  return r;
}

inline json::Value image_bench_json(const ImageBenchResult& r, double compute_gflops) {
  return json::Value(json::Object{{"width", json::Value(r.width)},
                                  {"height", json::Value(r.height)},
                                  {"grid_h", json::Value(r.grid.h)},
                                  {"grid_w", json::Value(r.grid.w)},
                                  {"patches", json::Value(r.grid.patches())},
                                  {"tokens", json::Value(r.tokens)},
                                  {"preprocess_ms", json::Value(r.preprocess_ms)},
                                  {"encode_ms", json::Value(r.encode_ms)},
                                  {"encode_gflops", json::Value(r.gflops)},
                                  {"encode_compute_fraction", json::Value(r.gflops / compute_gflops)}});
}

inline void print_image_bench(const ImageBenchResult& r, double compute_gflops) {
  std::printf("image %lldx%lld: %lld patches (%lldx%lld), %lld tokens; preprocess %.1f ms, encode %.1f ms = %.1f GFLOP/s = %.1f%% of the f32 FMA peak\n",
              static_cast<long long>(r.width), static_cast<long long>(r.height), static_cast<long long>(r.grid.patches()),
              static_cast<long long>(r.grid.w), static_cast<long long>(r.grid.h), static_cast<long long>(r.tokens), r.preprocess_ms,
              r.encode_ms, r.gflops, 100.0 * r.gflops / compute_gflops);
}

}  // namespace kylin::cli
