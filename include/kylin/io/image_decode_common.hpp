// What the image decoders (image_decode_<format>.hpp) share: the limits, the request errors, the
// limit check made before any allocation sized from a header, and EXIF orientation as Pillow's
// ImageOps.exif_transpose applies it.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "kylin/core/error.hpp"
#include "kylin/vision/image.hpp"

namespace kylin::io {

// Refused before decoding: a file over max_bytes, or declared dimensions over max_side or whose
// product is over max_pixels (what a decompression bomb declares).
struct ImageLimits {
  std::int64_t max_pixels = 64LL << 20;
  std::int64_t max_side = 32768;
  std::size_t max_bytes = 64u << 20;
};

namespace detail {

[[noreturn]] inline void image_error(std::string_view what, const std::string& message) {
  throw Error(ErrorCategory::request, std::string(what), message);
}

// `format` is "PNG", "JPEG", ...; checked on the header's numbers, before the pixels are allocated.
inline void check_image_size(std::int64_t width, std::int64_t height, const ImageLimits& limits, std::string_view what,
                             std::string_view format) {
  const std::string dims = std::to_string(width) + "x" + std::to_string(height);
  const std::string f(format);
  if (width <= 0 || height <= 0) image_error(what, f + " image has no pixels (" + dims + ")");
  if (width > limits.max_side || height > limits.max_side)
    image_error(what, f + " image is " + dims + " pixels, over the limit of " + std::to_string(limits.max_side) +
                          " pixels per side");
  if (width * height > limits.max_pixels)
    image_error(what, f + " image is " + dims + " = " + std::to_string(width * height) + " pixels, over the limit of " +
                          std::to_string(limits.max_pixels) + " pixels");
}

inline vision::Image blank_image(std::int64_t width, std::int64_t height) {
  vision::Image image;
  image.width = width;
  image.height = height;
  image.rgb.assign(static_cast<std::size_t>(width * height * 3), 0);
  return image;
}

// The first value of IFD0's Orientation tag (274) in EXIF data (with or without the "Exif\0\0"
// that JPEG's APP1 carries), 1 when absent. Like Pillow's Exif.load (PIL/Image.py, over
// TiffImagePlugin.ImageFileDirectory_v2): any integer type, the last entry wins. Malformed data
// reads as no orientation, where Pillow may raise instead (HF would then fail the request).
inline int exif_orientation(std::span<const std::uint8_t> d) {
  if (d.size() >= 6 && std::memcmp(d.data(), "Exif\0\0", 6) == 0) d = d.subspan(6);
  if (d.size() < 8) return 1;
  bool le;
  if (std::memcmp(d.data(), "II*\0", 4) == 0) le = true;
  else if (std::memcmp(d.data(), "MM\0*", 4) == 0) le = false;
  else return 1;
  const auto u16 = [&](std::size_t o) -> std::uint32_t { return le ? d[o] | d[o + 1] << 8 : d[o] << 8 | d[o + 1]; };
  const auto u32 = [&](std::size_t o) -> std::uint32_t { return le ? u16(o) | u16(o + 2) << 16 : u16(o) << 16 | u16(o + 2); };
  const std::size_t ifd = u32(4);
  if (ifd > d.size() - 2) return 1;
  const std::size_t count = u16(ifd);
  std::int64_t orientation = 1;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t e = ifd + 2 + 12 * i;
    if (e + 12 > d.size()) break;
    if (u16(e) != 274) continue;
    const std::uint32_t type = u16(e + 2), n = u32(e + 4);
    const std::size_t unit = type == 3 || type == 8 ? 2 : type == 4 || type == 9 ? 4 : type == 1 || type == 6 ? 1 : 0;
    if (unit == 0 || n == 0) continue;  // not an integer type, or no value
    std::size_t at = e + 8;
    if (std::uint64_t{n} * unit > 4) at = u32(e + 8);
    if (at > d.size() || d.size() - at < unit) continue;
    switch (type) {
      case 1: orientation = d[at]; break;
      case 6: orientation = static_cast<std::int8_t>(d[at]); break;
      case 3: orientation = u16(at); break;
      case 8: orientation = static_cast<std::int16_t>(u16(at)); break;
      case 4: orientation = u32(at); break;
      default: orientation = static_cast<std::int32_t>(u32(at)); break;
    }
  }
  return orientation >= 1 && orientation <= 8 ? static_cast<int>(orientation) : 1;
}

// Image.transpose as exif_transpose (PIL/ImageOps.py) picks it: 2 FLIP_LEFT_RIGHT, 3 ROTATE_180,
// 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE, 6 ROTATE_270, 7 TRANSVERSE, 8 ROTATE_90 (counter-clockwise).
inline vision::Image apply_orientation(vision::Image in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const std::int64_t w = in.width, h = in.height;
  const bool swap = orientation >= 5;
  vision::Image out = blank_image(swap ? h : w, swap ? w : h);
  for (std::int64_t y = 0; y < out.height; ++y) {
    for (std::int64_t x = 0; x < out.width; ++x) {
      std::int64_t sy = y, sx = x;
      switch (orientation) {
        case 2: sx = w - 1 - x; break;
        case 3: sy = h - 1 - y, sx = w - 1 - x; break;
        case 4: sy = h - 1 - y; break;
        case 5: sy = x, sx = y; break;
        case 6: sy = h - 1 - x, sx = y; break;
        case 7: sy = h - 1 - x, sx = w - 1 - y; break;
        default: sy = x, sx = w - 1 - y; break;
      }
      std::memcpy(&out.rgb[static_cast<std::size_t>((y * out.width + x) * 3)],
                  &in.rgb[static_cast<std::size_t>((sy * w + sx) * 3)], 3);
    }
  }
  return out;
}

}  // namespace detail
}  // namespace kylin::io
