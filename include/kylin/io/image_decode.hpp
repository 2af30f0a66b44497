// decode_image: PNG, JPEG, WebP or GIF (first frame) bytes to the 8-bit RGB that HF's load_image
// gets from Pillow (exif_transpose, then convert("RGB")), through libpng, libjpeg-turbo, libwebp and
// giflib (link kylin::image). docs/IMAGES.md lists how each odd case maps to pixels.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "kylin/io/image_decode_common.hpp"
#include "kylin/io/image_decode_gif.hpp"
#include "kylin/io/image_decode_jpeg.hpp"
#include "kylin/io/image_decode_png.hpp"
#include "kylin/io/image_decode_webp.hpp"
#include "kylin/vision/image.hpp"

namespace kylin::io {

// Decodes PNG, JPEG, WebP or GIF (first frame) by its signature into 8-bit RGB with the EXIF orientation applied.
// `what` names the input in errors (e.g. "messages[0].content[1].image_url"); every error is a
// kylin::Error(ErrorCategory::request, what, ...), and the limits are checked before any large allocation.
inline vision::Image decode_image(std::span<const std::uint8_t> bytes, std::string_view what, const ImageLimits& limits = {}) {
  if (bytes.size() > limits.max_bytes)
    detail::image_error(what, "image is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                                  std::to_string(limits.max_bytes) + " bytes");
  if (bytes.empty()) detail::image_error(what, "image is empty (0 bytes)");
  const auto starts = [&](std::string_view sig, std::size_t at = 0) {
    return bytes.size() >= at + sig.size() && std::memcmp(bytes.data() + at, sig.data(), sig.size()) == 0;
  };
  if (starts("\x89PNG\r\n\x1a\n")) return detail::png::decode(bytes, what, limits);
  if (starts("\xff\xd8\xff")) return detail::jpeg::decode(bytes, what, limits);
  if (starts("RIFF") && starts("WEBP", 8)) return detail::webp::decode(bytes, what, limits);
  if (starts("GIF87a") || starts("GIF89a")) return detail::gif::decode(bytes, what, limits);
  detail::image_error(what, "not an image of a format taken (PNG, JPEG, WebP, GIF): the data starts with neither signature");
}

}  // namespace kylin::io
