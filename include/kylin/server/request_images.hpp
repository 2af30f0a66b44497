// Images in requests: each API's image part (OpenAI image_url, Anthropic image, Responses input_image) becomes
// the template's {"type": "image"} item and a RequestImage holding its file's bytes and the field that sent it.
// Bytes only come inline (data URLs, base64 sources): a server that fetched URLs could be turned on its own network.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kylin/core/json.hpp"
#include "kylin/server/api_error.hpp"

namespace kylin::server {

// Bounds on a request's images, checked before anything is decoded (kylin-server --max-images,
// --max-image-bytes); the decoder's own bounds on pixels come after (io::ImageLimits).
struct ImageRequestLimits {
  std::size_t max_images = 16;                    // per request; more: 400
  std::size_t max_bytes = std::size_t{20} << 20;  // an image file's bytes (OpenAI's 20 MB); more: 413
};

// Strict RFC 4648 base64 (standard alphabet; '=' padding optional, nothing after it); `field` names the input.
inline std::string decode_base64(std::string_view s, const std::string& field) {
  static constexpr auto table = [] {
    std::array<std::int8_t, 256> t{};
    t.fill(-1);
    constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (std::size_t i = 0; i < alphabet.size(); ++i) t[static_cast<unsigned char>(alphabet[i])] = static_cast<std::int8_t>(i);
    return t;
  }();
  while (!s.empty() && s.back() == '=' && s.size() % 4 != 1) s.remove_suffix(1);
  if (s.size() % 4 == 1) throw invalid(field, "the base64 data is truncated (its length is not a whole number of bytes)");
  std::string out;
  out.reserve(s.size() / 4 * 3 + 2);
  std::uint32_t acc = 0;
  int bits = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::int8_t v = table[static_cast<unsigned char>(s[i])];
    if (v < 0) throw invalid(field, "the base64 data has a character outside its alphabet at offset " + std::to_string(i));
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// An image part's data and where it came from; parsing only checks its syntax, Service checks the limits
// (count first, then size) before anything is decoded.
struct RequestImage {
  std::string base64;  // the image file, base64
  std::string field;   // where the request sent it, e.g. "messages[0].content[1].image_url"
};

// The template's items of a content list: an image (the Qwen3.5 template renders
// <|vision_start|><|image_pad|><|vision_end|> for it) and text.
inline json::Value image_item() {
  json::Value p = json::Object{};
  p.set("type", "image");
  return p;
}
inline json::Value text_item(std::string text) {
  json::Value p = json::Object{};
  p.set("type", "text");
  p.set("text", std::move(text));
  return p;
}

// A data URL (data:image/png;base64,...) as a RequestImage; http(s) URLs and others are refused naming the field.
inline RequestImage image_from_url(std::string_view url, const std::string& field) {
  if (url.starts_with("http://") || url.starts_with("https://"))
    throw invalid(field, "remote image URLs are not fetched by this server; send the image inline as a data URL (data:image/png;base64,...)");
  if (!url.starts_with("data:")) throw invalid(field, "expected a data URL (data:image/png;base64,...)");
  const auto comma = url.find(',');
  if (comma == std::string_view::npos) throw invalid(field, "the data URL has no ',' before its data");
  const std::string_view head = url.substr(5, comma - 5);
  if (!head.ends_with(";base64")) throw invalid(field, "the data URL must be base64 (data:image/png;base64,...)");
  if (const std::string_view type = head.substr(0, head.size() - 7); !type.empty() && !type.starts_with("image/"))
    throw invalid(field, "the data URL's media type '" + std::string(type) + "' is not an image type");
  return {std::string(url.substr(comma + 1)), field};
}

// The request's images against the limits, in order: a count over them is a 400, an image over the bytes a 413.
inline void check_image_limits(const std::vector<RequestImage>& images, const ImageRequestLimits& limits) {
  if (images.size() > limits.max_images)
    throw invalid(images[limits.max_images].field, "the request has " + std::to_string(images.size()) + " images; this server takes at most " +
                                                       std::to_string(limits.max_images) + " (--max-images)");
  for (const RequestImage& im : images)
    if (im.base64.size() / 4 * 3 > limits.max_bytes)
      throw ApiError(status::payload_too_large, "the image has more than " + std::to_string(limits.max_bytes) + " bytes (the server's --max-image-bytes)",
                     im.field, "image_too_large");
}

}  // namespace kylin::server
