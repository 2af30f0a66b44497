// The Qwen3.5 image processor: smart_resize against Python's semantics, torch's uint8 antialiased bicubic
// (its weights' invariants here; bit for bit against tests/data/images/resized below), the float32
// normalisation and the merge-block patch order, preprocessor_config.json.
#include "kylin/vision/processor.hpp"

#include <doctest/doctest.h>

#include <fstream>

#include "common/read_text.hpp"
#include "common/temp_dir.hpp"
#include "kylin/io/image_decode.hpp"

namespace processor_test {

using namespace kylin::vision;

// smart_resize for a factor-32 config: {height, width} -> {resized height, resized width}.
struct SizeCase {
  std::int64_t h, w, rh, rw;
};

ProcessorConfig with_pixels(std::int64_t min_pixels, std::int64_t max_pixels) {
  ProcessorConfig c = ProcessorConfig::qwen35();
  c.min_pixels = min_pixels;
  c.max_pixels = max_pixels;
  return c;
}

void check_sizes(const ProcessorConfig& c, const std::vector<SizeCase>& cases) {
  for (const auto& s : cases) {
    CAPTURE(s.h);
    CAPTURE(s.w);
    const ResizedSize r = smart_resize(s.h, s.w, c);
    CHECK(r.height == s.rh);
    CHECK(r.width == s.rw);
  }
}

// A w x h image whose bytes are a fixed function of (y, x, channel), not smooth, not constant.
Image pattern(std::int64_t w, std::int64_t h, unsigned seed = 1) {
  Image img{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w * h * 3))};  // [h][w][3]
  std::uint32_t s = seed * 2654435761u + 12345u;
  for (auto& b : img.rgb) {
    s = s * 1664525u + 1013904223u;
    b = static_cast<std::uint8_t>(s >> 24);
  }
  return img;
}

Image constant(std::int64_t w, std::int64_t h, std::uint8_t v) {
  return Image{w, h, std::vector<std::uint8_t>(static_cast<std::size_t>(w * h * 3), v)};
}

template <class F>
void check_request_error(F&& f, const char* needle) {
  try {
    f();
    FAIL("no error");
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::request);
    CHECK(e.context() == "image");
    CHECK(std::string(e.message()).find(needle) != std::string::npos);
  }
}

}  // namespace processor_test

using namespace processor_test;

TEST_CASE("smart_resize: Qwen3.5's bounds (factor 32, min 65536, max 16777216), checked against Python") {
  // The expectations are transformers' smart_resize run in Python 3 on each case.
  check_sizes(ProcessorConfig::qwen35(), {
      {48, 64, 224, 320},      // the test image a: under min_pixels, both sides grow by sqrt(65536 / 3072) and ceil
      {37, 100, 160, 448},     // b
      {260, 300, 256, 288},    // c: 260/32 = 8.125 -> 8, 300/32 = 9.375 -> 9; in range
      {48, 80, 224, 352},      {80, 48, 352, 224},    {112, 144, 256, 320}, {47, 49, 256, 288},
      {1000, 1000, 992, 992},  {1080, 1920, 1088, 1920}, {720, 1280, 704, 1280}, {2160, 3840, 2176, 3840},
      {4000, 3000, 4000, 3008}, {16, 16, 256, 256},  {1, 1, 256, 256},       {1, 200, 32, 3648},
      {4096, 4096, 4096, 4096}, {4097, 4096, 4096, 4096},
      {5000, 5000, 4096, 4096},  // over max_pixels: beta = sqrt(25e6 / 2^24), floor
      {6000, 8000, 3520, 4704},  // over max_pixels, 6000/32 = 187.5 rounds to 188 (even) first
      {100, 20000, 96, 20000},   {20000, 100, 20000, 96},  // aspect exactly 200 is allowed
  });
}

TEST_CASE("smart_resize: Python's round is half to even") {
  // min_pixels 1 keeps the min branch away unless a side rounds to 0.
  check_sizes(with_pixels(1, std::int64_t{1} << 40), {
      {48, 64, 64, 64},     // 1.5 -> 2
      {80, 64, 64, 64},     // 2.5 -> 2
      {112, 64, 128, 64},   // 3.5 -> 4
      {144, 64, 128, 64},   // 4.5 -> 4
      {47, 49, 32, 64},     // 1.47 -> 1, 1.53 -> 2
      {37, 100, 32, 96},    // 1.16 -> 1, 3.125 -> 3
      {6000, 8000, 6016, 8000},
      {16, 16, 32, 32},     // 0.5 -> 0: 0 pixels < 1, the min branch: ceil(16 * (1/16) / 32) = 1
      {1, 200, 32, 32},
  });
}

TEST_CASE("smart_resize: the min and max branches, other factors") {
  // Python: smart_resize(h, w, 32, 0, 65536) -> max branch with a side floored to 0, kept at one factor.
  check_sizes(with_pixels(0, 65536), {{100, 20000, 32, 3616}, {20000, 100, 3616, 32}, {1000, 1000, 256, 256}});
  ProcessorConfig qwen2;  // Qwen2-VL's: patch 14 (factor 28), 3136 .. 1003520
  qwen2.patch_size = 14;
  check_sizes(qwen2, {{48, 64, 56, 56}, {37, 100, 28, 112}, {260, 300, 252, 308}, {48, 80, 56, 84},
                      {6000, 8000, 840, 1148}, {100, 20000, 56, 14140}, {1080, 1920, 728, 1316}, {16, 16, 56, 56}});
}

TEST_CASE("smart_resize: aspect ratio over 200 and empty images are request errors") {
  const auto c = ProcessorConfig::qwen35();
  check_request_error([&] { smart_resize(1, 201, c); }, "aspect ratio");
  check_request_error([&] { smart_resize(20100, 100, c); }, "aspect ratio");
  check_request_error([&] { smart_resize(33, 9999, c); }, "aspect ratio");
  check_request_error([&] { smart_resize(0, 10, c); }, "no pixels");
  check_request_error([&] { smart_resize(10, -1, c); }, "no pixels");
  check_request_error([&] { smart_resize(8, 8, with_pixels(0, 65536)); }, "no pixels");  // rounds to 0 x 0
  CHECK_NOTHROW(smart_resize(1, 200, c));
}

TEST_CASE("bicubic_axis: Pillow's bounds, weights normalised, torch's int16 precision") {
  for (const auto& [in_size, out_size] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {64, 320}, {48, 224}, {100, 448}, {37, 160}, {300, 288}, {260, 256}, {5, 7}, {1, 32}, {7, 1},
           {1000, 33}, {4097, 4096}, {31, 32}, {20000, 96}, {2, 3}}) {
    const std::int64_t in = in_size, out = out_size;  // copies: clang 14 cannot capture structured bindings
    CAPTURE(in);
    CAPTURE(out);
    const ResampleAxis a = bicubic_axis(in, out);
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    CHECK(a.taps == static_cast<std::int64_t>(std::ceil(scale >= 1 ? 2 * scale : 2.0)) * 2 + 1);
    int w_max = 0;
    for (std::int64_t i = 0; i < out; ++i) {
      const auto k = static_cast<std::size_t>(i);
      REQUIRE(a.first[k] >= 0);
      REQUIRE(a.count[k] >= 1);
      REQUIRE(a.first[k] + a.count[k] <= in);
      long sum = 0;
      for (std::int64_t j = 0; j < a.taps; ++j) {
        const int w = a.weights[static_cast<std::size_t>(i * a.taps + j)];
        if (j >= a.count[k]) CHECK(w == 0);
        sum += w;
        w_max = std::max(w_max, w);
      }
      // The rounded weights sum to 2^p within half a unit per tap.
      CHECK(std::abs(sum - (1L << a.precision)) * 2 <= a.count[k]);
    }
    // p is the largest precision <= 22 at which the largest weight fits int16.
    CHECK(a.precision <= 22);
    CHECK(w_max < 32768);
    if (a.precision < 22) CHECK(w_max >= 16384);                        // one more bit would overflow
    if (scale < 1) CHECK((a.precision == 14 || a.precision == 15));      // upscaling: the largest weight is in (0.5, 1]
    if (in * 5 == out) CHECK(a.precision == 14);                         // a pixel centre hit exactly: weight 1
  }
}

TEST_CASE("bicubic_axis: small cases by hand") {
  // 1 -> n: every output reads the one pixel with weight 1.0 -> 2^14 (2^15 does not fit int16).
  const ResampleAxis up = bicubic_axis(1, 4);
  CHECK(up.precision == 14);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(up.first[i] == 0);
    CHECK(up.count[i] == 1);
    CHECK(up.weights[i * static_cast<std::size_t>(up.taps)] == 16384);
  }
  // 2 -> 1: scale 2, support 4, centre 1: both pixels at distance 0.5 -> equal weights 0.5, p = 15.
  const ResampleAxis down = bicubic_axis(2, 1);
  CHECK(down.taps == 9);
  CHECK(down.count[0] == 2);
  CHECK(down.precision == 15);
  CHECK(down.weights[0] == 16384);
  CHECK(down.weights[1] == 16384);
  // Identity sizes (never run: the pass is skipped): output 2 reads pixels 1..4 at distances -1, 0, 1, 2,
  // weights (0, 1, 0, 0) -> p = 14, 16384 on the pixel itself.
  const ResampleAxis same = bicubic_axis(5, 5);
  CHECK(same.precision == 14);
  CHECK(same.first[2] == 1);
  CHECK(same.count[2] == 4);
  CHECK(same.weights[2 * static_cast<std::size_t>(same.taps) + 1] == 16384);
  CHECK(same.weights[2 * static_cast<std::size_t>(same.taps) + 0] == 0);
}

TEST_CASE("resize_bicubic: an unchanged axis is skipped, constants stay, sizes as asked") {
  const Image img = pattern(37, 23);
  const Image same = resize_bicubic(img, 37, 23);
  CHECK(same.rgb == img.rgb);
  // Only the height changes: no width pass, so each column resizes alone (a 1-wide image gives the same).
  const Image tall = resize_bicubic(img, 37, 64);
  CHECK(tall.width == 37);
  CHECK(tall.height == 64);
  Image column{1, 23, {}};
  for (std::int64_t y = 0; y < 23; ++y)
    for (int c = 0; c < 3; ++c) column.rgb.push_back(img.at(y, 5, c));
  const Image column_tall = resize_bicubic(column, 1, 64);
  for (std::int64_t y = 0; y < 64; ++y)
    for (int c = 0; c < 3; ++c) CHECK(tall.at(y, 5, c) == column_tall.at(y, 0, c));
  for (const auto& size : std::vector<std::pair<std::int64_t, std::int64_t>>{{320, 224}, {16, 9}, {1, 1}, {3, 500}}) {
    const std::int64_t w = size.first, h = size.second;
    const Image r = resize_bicubic(constant(37, 23, 200), w, h);
    REQUIRE(r.width == w);
    REQUIRE(r.height == h);
    for (auto b : r.rgb) REQUIRE(b == 200);
    for (auto b : resize_bicubic(constant(37, 23, 255), w, h).rgb) REQUIRE(b == 255);
    for (auto b : resize_bicubic(constant(37, 23, 0), w, h).rgb) REQUIRE(b == 0);
  }
  check_request_error([&] { resize_bicubic(img, 0, 5); }, "resize");
  check_request_error([&] { resize_bicubic(Image{2, 2, {}}, 4, 4); }, "RGB image");
}

TEST_CASE("resize_bicubic: the width pass is rounded to uint8 before the height pass") {
  // 2x2 -> 1x1: both axes weigh their two pixels 16384 / 2^15 (bicubic_axis(2, 1) above).
  // Width pass: rows (0, 1) and (0, 0) -> (2^14 + 16384) >> 15 = 1 and 0; height pass: (1, 0) -> 1.
  // One 2-D pass without the rounding would give round(0.25) = 0.
  Image img{2, 2, {0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0}};
  const Image r = resize_bicubic(img, 1, 1);
  CHECK(r.at(0, 0, 0) == 1);
}

TEST_CASE("patchify: merge-block order, (channel, frame, row, col) inside a patch, (x - 127.5) / 127.5") {
  const ProcessorConfig c = ProcessorConfig::qwen35();
  const Image img = pattern(96, 64, 7);  // 2 x 3 merge blocks of 2 x 2 patches of 16 x 16
  const PixelValues pv = patchify(img, c);
  CHECK(pv.grid.t == 1);
  CHECK(pv.grid.h == 4);
  CHECK(pv.grid.w == 6);
  CHECK(pv.patch_dim == 1536);
  REQUIRE(pv.values.size() == 24u * 1536u);
  for (std::int64_t row = 0; row < 24; ++row) {
    const std::int64_t block = row / 4, by = block / 3, bx = block % 3, my = (row % 4) / 2, mx = row % 2;
    for (std::int64_t k = 0; k < 1536; ++k) {
      const std::int64_t ch = k / 512, py = (k % 256) / 16, px = k % 16;  // frame = (k / 256) % 2
      const std::uint8_t x = img.at((by * 2 + my) * 16 + py, (bx * 2 + mx) * 16 + px, static_cast<int>(ch));
      const float expected = (static_cast<float>(x) - 127.5f) / 127.5f;
      REQUIRE(pv.values[static_cast<std::size_t>(row * 1536 + k)] == expected);
    }
  }
  check_request_error([&] { patchify(pattern(96, 48), c); }, "multiple of 32");
}

TEST_CASE("patchify: the normalisation in float32, per channel") {
  ProcessorConfig c = ProcessorConfig::qwen35();
  const Image img = constant(32, 32, 0);
  CHECK(patchify(img, c).values[0] == -1.0f);
  CHECK(patchify(constant(32, 32, 255), c).values[0] == 1.0f);
  CHECK(patchify(constant(32, 32, 127), c).values[0] == doctest::Approx(-0.5 / 127.5).epsilon(1e-7));
  c.image_mean = {0.48145466, 0.4578275, 0.40821073};
  c.image_std = {0.26862954, 0.26130258, 0.27577711};
  const PixelValues pv = patchify(constant(32, 32, 200), c);
  for (std::size_t ch = 0; ch < 3; ++ch) {
    const float mean = static_cast<float>(c.image_mean[ch]) * 255.0f, stdev = static_cast<float>(c.image_std[ch]) * 255.0f;
    CHECK(pv.values[ch * 512] == (200.0f - mean) / stdev);
    CHECK(pv.values[ch * 512] == doctest::Approx((200.0 / 255 - c.image_mean[ch]) / c.image_std[ch]).epsilon(1e-6));
  }
}

TEST_CASE("preprocess: a small image is upscaled to min_pixels, grid in patches") {
  const PixelValues pv = preprocess(pattern(64, 48), ProcessorConfig::qwen35());
  CHECK(pv.grid.t == 1);
  CHECK(pv.grid.h == 14);
  CHECK(pv.grid.w == 20);
  CHECK(pv.values.size() == 280u * 1536u);
  for (float v : pv.values) REQUIRE((v >= -1.0f && v <= 1.0f));
}

namespace processor_test {

const std::filesystem::path tiny_vl = std::filesystem::path(KYLIN_TEST_DATA) / "models" / "tiny-qwen35-vl";

// from_dir on a directory holding only preprocessor_config.json = `text`.
ProcessorConfig config_from(const kylin::test::TempDir& dir, const std::string& text) {
  std::ofstream(dir / "preprocessor_config.json") << text;
  return ProcessorConfig::from_dir(dir.path());
}

void check_config_error(const std::string& text, const std::string& field) {
  kylin::test::TempDir dir;
  CAPTURE(text);
  try {
    config_from(dir, text);
    FAIL("no error");
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::config);
    const std::string file = (dir / "preprocessor_config.json").string();
    CHECK(e.context() == (field.empty() ? file : file + ": " + field));
  }
}

}  // namespace processor_test

TEST_CASE("ProcessorConfig::from_dir: the Qwen3.5 file, no file, HF's class defaults for missing keys") {
  const ProcessorConfig c = ProcessorConfig::from_dir(tiny_vl);
  CHECK(c.min_pixels == 65536);
  CHECK(c.max_pixels == 16777216);
  CHECK(c.patch_size == 16);
  CHECK(c.temporal_patch_size == 2);
  CHECK(c.merge_size == 2);
  CHECK(c.image_mean == std::array<double, 3>{0.5, 0.5, 0.5});
  CHECK(c.image_std == std::array<double, 3>{0.5, 0.5, 0.5});
  CHECK(c.patch_dim() == 1536);
  kylin::test::TempDir empty;
  const ProcessorConfig none = ProcessorConfig::from_dir(empty.path());  // no file: the released Qwen3.5 values
  CHECK(none.min_pixels == 65536);
  CHECK(none.max_pixels == 16777216);
  CHECK(none.patch_size == 16);
  kylin::test::TempDir dir;
  const ProcessorConfig bare = config_from(dir, "{}");  // Qwen2VLImageProcessorFast's class attributes
  CHECK(bare.patch_size == 14);
  CHECK(bare.min_pixels == 56 * 56);
  CHECK(bare.max_pixels == 28 * 28 * 1280);
  CHECK(bare.image_mean[0] == 0.48145466);
  CHECK(bare.image_std[2] == 0.27577711);
  // The legacy top-level keys override size (Qwen2-VL's files); one number is every channel's.
  const ProcessorConfig legacy = config_from(
      dir, R"({"min_pixels": 3136, "max_pixels": 12845056, "size": {"shortest_edge": 1, "longest_edge": 2},
              "patch_size": 14, "image_mean": 0.5, "image_std": [0.25, 0.5, 1], "resample": 3, "do_resize": true,
              "rescale_factor": 0.00392156862745098})");
  CHECK(legacy.min_pixels == 3136);
  CHECK(legacy.max_pixels == 12845056);
  CHECK(legacy.image_mean == std::array<double, 3>{0.5, 0.5, 0.5});
  CHECK(legacy.image_std == std::array<double, 3>{0.25, 0.5, 1.0});
  CHECK(config_from(dir, R"({"min_pixels": 100, "max_pixels": 200})").max_pixels == 200);
}

TEST_CASE("ProcessorConfig::from_dir: bad values name the file and the field") {
  check_config_error(R"({"patch_size": "16"})", "patch_size");
  check_config_error(R"({"patch_size": 0})", "patch_size");
  check_config_error(R"({"merge_size": 2.5})", "merge_size");
  check_config_error(R"({"temporal_patch_size": -1})", "temporal_patch_size");
  check_config_error(R"({"size": {"shortest_edge": -5, "longest_edge": 10}})", "size.shortest_edge");
  check_config_error(R"({"size": {"shortest_edge": 5, "longest_edge": 0}})", "size.longest_edge");
  check_config_error(R"({"size": {"shortest_edge": 5}})", "size");
  check_config_error(R"({"size": [1, 2]})", "size");
  check_config_error(R"({"max_pixels": "big"})", "max_pixels");
  check_config_error(R"({"image_mean": [0.5, 0.5]})", "image_mean");
  check_config_error(R"({"image_std": [0.5, 0, 0.5]})", "image_std");
  check_config_error(R"({"do_normalize": false})", "do_normalize");
  check_config_error(R"({"resample": 2})", "resample");
  check_config_error(R"({"rescale_factor": 0.5})", "rescale_factor");
  check_config_error("[]", "");
}

namespace processor_test {

const std::string data_dir = KYLIN_TEST_DATA;

Image decode_file(const std::string& file) {
  const std::string text = kylin::test::read_text(data_dir + "/" + file);
  const std::vector<std::uint8_t> bytes(text.begin(), text.end());
  return kylin::io::decode_image(bytes, file);
}

// Each reference image entry once (a_64x48 appears in two cases).
std::vector<const kylin::json::Value*> reference_images(const kylin::json::Value& ref) {
  std::vector<const kylin::json::Value*> out;
  std::vector<std::string> seen;
  for (const auto& c : ref.find("cases")->as_array())
    for (const auto& entry : c.find("images")->as_array()) {
      const std::string file = entry.find("file")->as_string();
      if (std::find(seen.begin(), seen.end(), file) != seen.end()) continue;
      seen.push_back(file);
      out.push_back(&entry);
    }
  return out;
}

// `got` against a float64 reference rounded to 9 digits: float32 pixel values are within ~6e-8 relative each,
// so sums over n of them stay within 1e-6 of the scale of the sum of magnitudes.
void check_close(double got, double want, double scale) { CHECK(std::abs(got - want) <= 1e-6 * std::max(1.0, scale)); }

}  // namespace processor_test

TEST_CASE("resize_bicubic reproduces tests/data/images/resized bit for bit; preprocess the reference pixel_values") {
  const auto ref = kylin::json::parse(kylin::test::read_text(data_dir + "/reference/tiny-qwen35-vl.json"));
  const ProcessorConfig config = ProcessorConfig::from_dir(tiny_vl);
  const auto images = reference_images(ref);
  REQUIRE(images.size() >= 3);
  for (const kylin::json::Value* entry : images) {
    const std::string file = entry->find("file")->as_string();
    CAPTURE(file);
    const Image original = decode_file(file);
    const Image expected = decode_file(entry->find("resized_png")->as_string());
    const ResizedSize size = smart_resize(original.height, original.width, config);
    CHECK(size.width == entry->find("resized_width")->as_int());
    CHECK(size.height == entry->find("resized_height")->as_int());
    const Image resized = resize_bicubic(original, size.width, size.height);
    REQUIRE(resized.width == expected.width);
    REQUIRE(resized.height == expected.height);
    std::size_t differing = 0;
    for (std::size_t k = 0; k < resized.rgb.size(); ++k) differing += resized.rgb[k] != expected.rgb[k];
    CHECK(differing == 0);

    const PixelValues pv = preprocess(original, config);
    const auto& grid = entry->find("grid_thw")->as_array();
    CHECK(pv.grid.t == grid[0].as_int());
    CHECK(pv.grid.h == grid[1].as_int());
    CHECK(pv.grid.w == grid[2].as_int());
    const auto& shape = entry->find("pixel_values_shape")->as_array();
    REQUIRE(pv.grid.patches() == shape[0].as_int());
    REQUIRE(pv.patch_dim == shape[1].as_int());
    // The reference's sums: plain, absolute, and weighted by (k + 1) / n over the flat index k.
    const double n = static_cast<double>(pv.values.size());
    double sum = 0, abs_sum = 0, weighted = 0;
    for (std::size_t k = 0; k < pv.values.size(); ++k) {
      sum += pv.values[k];
      abs_sum += std::abs(pv.values[k]);
      weighted += pv.values[k] * (static_cast<double>(k + 1) / n);
    }
    check_close(sum, entry->find("pixel_values_sum")->as_double(), abs_sum);
    check_close(abs_sum, entry->find("pixel_values_abs_sum")->as_double(), abs_sum);
    check_close(weighted, entry->find("pixel_values_weighted_sum")->as_double(), abs_sum);
    const auto& first = entry->find("pixel_values_first64")->as_array();
    REQUIRE(first.size() == 64);
    for (std::size_t k = 0; k < 64; ++k) CHECK(std::abs(pv.values[k] - first[k].as_double()) <= 1e-6);
    const auto& rows = entry->find("pixel_values_row_sums")->as_array();
    REQUIRE(static_cast<std::int64_t>(rows.size()) == pv.grid.patches());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      double row = 0, row_abs = 0;
      for (std::int64_t k = 0; k < pv.patch_dim; ++k) {
        const float v = pv.values[r * static_cast<std::size_t>(pv.patch_dim) + static_cast<std::size_t>(k)];
        row += v;
        row_abs += std::abs(v);
      }
      check_close(row, rows[r].as_double(), row_abs);
    }
  }
}
