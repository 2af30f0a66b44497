// The antialiased bicubic resize of 8-bit RGB images exactly as torch's CPU uint8 kernel computes it
// (what HF's Qwen2VLImageProcessorFast gets from torchvision F.resize(BICUBIC, antialias=True) on a CPU).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kylin/core/error.hpp"
#include "kylin/vision/image.hpp"

namespace kylin::vision {

// One axis of the resample, as torch's HelperInterpBase::_compute_index_ranges_int16_weights
// (aten/src/ATen/native/cpu/UpSampleKernel.cpp) leaves it: per output index the first source index
// and how many taps it reads, the taps as int16 at one precision shared by the whole axis.
struct ResampleAxis {
  std::int64_t in_size = 0, out_size = 0;
  std::int64_t taps = 0;              // max_interp_size = ceil(support) * 2 + 1: the row width of `weights`
  unsigned precision = 0;             // the weights are w * 2^precision, rounded
  std::vector<std::int64_t> first;    // [out_size] first source index (Pillow's xmin)
  std::vector<std::int64_t> count;    // [out_size] taps used, <= taps (Pillow's xsize)
  std::vector<std::int16_t> weights;  // [out_size][taps], zero past count
};

namespace resize_detail {

// v rounded to a double right here. Tests and kylin's programs build with -march=native, where GCC's
// default -ffp-contract=fast would fuse a product into the next add (an FMA, one rounding instead of
// two); torch and the numpy oracle round each product, and one ulp can move a weight's int16 rounding
// or a xmin truncation (none did over 181,600 axes of 1..700 pixels, but nothing rules it out). A volatile
// round trip is the portable way to forbid the fusion; the weights are computed once per axis.
inline double rounded(double v) {
  volatile double r = v;
  return r;
}

// HelperInterpCubic::aa_filter<double, /*use_keys_cubic=*/true> with UpSample.h's cubic_convolution1/2,
// Keys a = -0.5 (Pillow's bicubic_filter), in torch's order of operations.
inline double keys_cubic(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) {  // ((a + 2) * x - (a + 3)) * x * x + 1
    const double t = rounded((a + 2) * x) - (a + 3);
    return rounded(t * x * x) + 1;
  }
  if (x < 2.0) {  // ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    const double t = rounded(a * x) - 5 * a;
    const double u = rounded(t * x) + 8 * a;
    return rounded(u * x) - 4 * a;
  }
  return 0.0;
}

// _compute_indices_min_size_weights_aa for output i: Pillow's precompute_coeffs bounds
// (src/libImaging/Resample.c), the filter at the source pixel centres, then normalised to sum 1.
// `row` is [taps]; returns the row's largest weight (0 when its weights sum to 0).
inline double axis_row(std::int64_t i, const ResampleAxis& a, double scale, double support, double* row,
                       std::int64_t& xmin, std::int64_t& xsize) {
  const double center = rounded(scale * (static_cast<double>(i) + 0.5));
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  xmin = std::max(static_cast<std::int64_t>(center - support + 0.5), std::int64_t{0});  // truncation, as torch
  xsize = std::min(static_cast<std::int64_t>(center + support + 0.5), a.in_size) - xmin;
  xsize = std::clamp(xsize, std::int64_t{0}, a.taps);  // torch: precision can make it one too many
  double total = 0.0;
  for (std::int64_t j = 0; j < xsize; ++j) {
    row[j] = keys_cubic(rounded((static_cast<double>(j + xmin) - center + 0.5) * invscale));
    total += row[j];
  }
  double wt_max = 0.0;
  if (total != 0.0) {
    for (std::int64_t j = 0; j < xsize; ++j) {
      row[j] /= total;
      wt_max = std::max(wt_max, row[j]);
    }
  }
  for (std::int64_t j = xsize; j < a.taps; ++j) row[j] = 0.0;
  return wt_max;
}

}  // namespace resize_detail

// The bicubic antialiased axis in_size -> out_size (align_corners false, no scale factor given: what
// torchvision passes for an explicit size). Scale = in/out; the support widens to 2*scale when shrinking.
inline ResampleAxis bicubic_axis(std::int64_t in_size, std::int64_t out_size) {
  if (in_size <= 0 || out_size <= 0)
    throw Error(ErrorCategory::request, "image", "cannot resize " + std::to_string(in_size) + " pixels to " +
                                                     std::to_string(out_size));
  ResampleAxis a;
  a.in_size = in_size;
  a.out_size = out_size;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);  // area_pixel_compute_scale
  const double support = scale >= 1.0 ? (4 * 0.5) * scale : 4 * 0.5;                  // interp_size 4
  a.taps = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
  std::vector<double> real(static_cast<std::size_t>(out_size * a.taps));  // [out_size][taps]
  a.first.resize(static_cast<std::size_t>(out_size));
  a.count.resize(static_cast<std::size_t>(out_size));
  double wt_max = 0.0;
  for (std::int64_t i = 0; i < out_size; ++i) {
    const auto k = static_cast<std::size_t>(i);
    wt_max = std::max(wt_max, resize_detail::axis_row(i, a, scale, support, real.data() + i * a.taps, a.first[k],
                                                      a.count[k]));
  }
  // The largest precision <= 22 at which the axis's largest weight still fits int16.
  for (a.precision = 0; a.precision < 22; ++a.precision) {
    const int next = static_cast<int>(0.5 + wt_max * (1 << (a.precision + 1)));
    if (next >= (1 << 15)) break;
  }
  a.weights.resize(real.size());
  for (std::size_t k = 0; k < real.size(); ++k) {  // round half away from zero, as torch
    const double v = real[k] * (1 << a.precision);
    a.weights[k] = static_cast<std::int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return a;
}

namespace resize_detail {

// One output sample of basic_loop_aa_horizontal/vertical<uint8_t> (and the AVX2 ImagingResample*
// kernels, which compute the same integers): half an LSB, the int16 x uint8 products in int32, then
// shifted down and clamped to 0..255. `src` steps by `stride` bytes between taps.
inline std::uint8_t sample(const std::uint8_t* src, std::ptrdiff_t stride, const std::int16_t* w, std::int64_t n,
                           unsigned precision) {
  std::int32_t acc = std::int32_t{1} << (precision - 1);
  for (std::int64_t k = 0; k < n; ++k) acc += static_cast<std::int32_t>(w[k]) * src[k * stride];
  return static_cast<std::uint8_t>(std::clamp(acc >> precision, 0, 255));
}

// Along each row: [h][in.width][3] -> [h][axis.out_size][3].
inline Image horizontal_pass(const Image& in, const ResampleAxis& axis) {
  Image out{axis.out_size, in.height, std::vector<std::uint8_t>(static_cast<std::size_t>(axis.out_size * in.height * 3))};
  for (std::int64_t y = 0; y < in.height; ++y) {
    const std::uint8_t* row = in.rgb.data() + y * in.width * 3;  // [in.width][3]
    std::uint8_t* dst = out.rgb.data() + y * out.width * 3;      // [out.width][3]
    for (std::int64_t x = 0; x < out.width; ++x) {
      const std::int16_t* w = axis.weights.data() + x * axis.taps;
      const auto k = static_cast<std::size_t>(x);
      for (int c = 0; c < 3; ++c)
        dst[x * 3 + c] = sample(row + axis.first[k] * 3 + c, 3, w, axis.count[k], axis.precision);
    }
  }
  return out;
}

// Along each column: [in.height][w][3] -> [axis.out_size][w][3].
inline Image vertical_pass(const Image& in, const ResampleAxis& axis) {
  Image out{in.width, axis.out_size, std::vector<std::uint8_t>(static_cast<std::size_t>(in.width * axis.out_size * 3))};
  const std::ptrdiff_t stride = in.width * 3;  // bytes between rows
  for (std::int64_t y = 0; y < out.height; ++y) {
    const auto k = static_cast<std::size_t>(y);
    const std::int16_t* w = axis.weights.data() + y * axis.taps;
    const std::uint8_t* top = in.rgb.data() + axis.first[k] * stride;  // the first source row
    std::uint8_t* dst = out.rgb.data() + y * stride;                   // [w][3]
    for (std::int64_t i = 0; i < stride; ++i) dst[i] = sample(top + i, stride, w, axis.count[k], axis.precision);
  }
  return out;
}

}  // namespace resize_detail

// torch's uint8 antialiased bicubic resize (upsample_avx_bilinear_bicubic_uint8, or its fallback
// separable_upsample_generic_Nd_kernel_impl: the same integers): the width pass first, rounded to uint8,
// then the height pass; an axis whose size does not change is skipped (no pass, no rounding).
inline Image resize_bicubic(const Image& in, std::int64_t width, std::int64_t height) {
  if (in.width <= 0 || in.height <= 0 || in.rgb.size() != static_cast<std::size_t>(in.width * in.height * 3))
    throw Error(ErrorCategory::request, "image",
                "not a " + std::to_string(in.width) + "x" + std::to_string(in.height) + " RGB image");
  constexpr std::int64_t max_side = std::int64_t{1} << 20, max_pixels = std::int64_t{1} << 30;
  if (width <= 0 || height <= 0 || width > max_side || height > max_side || width * height > max_pixels)
    throw Error(ErrorCategory::request, "image",
                "cannot resize to " + std::to_string(width) + "x" + std::to_string(height));
  if (width == in.width && height == in.height) return in;
  if (width == in.width) return resize_detail::vertical_pass(in, bicubic_axis(in.height, height));
  Image wide = resize_detail::horizontal_pass(in, bicubic_axis(in.width, width));
  if (height == in.height) return wide;
  return resize_detail::vertical_pass(wide, bicubic_axis(in.height, height));
}

}  // namespace kylin::vision
