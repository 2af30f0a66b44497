// WebP through libwebp's animation decoder, as Pillow's WebPImagePlugin (src/_webp.c) reads every
// WebP file: the first frame composited on a zeroed RGBA canvas, alpha then dropped by convert("RGB").
#pragma once

#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <vector>

#include "kylin/io/image_decode_common.hpp"

namespace kylin::io::detail::webp {

struct Reader {
  WebPAnimDecoder* decoder = nullptr;
  ~Reader() { WebPAnimDecoderDelete(decoder); }
};

inline vision::Image decode(std::span<const std::uint8_t> bytes, std::string_view what, const ImageLimits& limits) {
  // The canvas size, from the header alone: WebPAnimDecoderNew allocates the whole canvas.
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) image_error(what, "invalid WebP: the file is truncated");
  if (status != VP8_STATUS_OK) image_error(what, "invalid WebP: unreadable header (status " + std::to_string(status) + ")");
  check_image_size(features.width, features.height, limits, what, "WebP");
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) image_error(what, "WebP: decoder version mismatch");
  options.color_mode = MODE_RGBA;  // not premultiplied: the color of translucent pixels kept, as Pillow's
  options.use_threads = 0;
  const WebPData data{bytes.data(), bytes.size()};
  Reader r;
  r.decoder = WebPAnimDecoderNew(&data, &options);
  if (!r.decoder) image_error(what, "invalid WebP: truncated or malformed chunks");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(r.decoder, &info)) image_error(what, "invalid WebP: no canvas");
  check_image_size(info.canvas_width, info.canvas_height, limits, what, "WebP");
  std::uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(r.decoder, &rgba, &timestamp) || !rgba)
    image_error(what, "invalid WebP: the first frame does not decode (truncated or corrupt)");
  vision::Image image = blank_image(info.canvas_width, info.canvas_height);
  const std::size_t pixels = image.rgb.size() / 3;
  for (std::size_t i = 0; i < pixels; ++i) std::memcpy(&image.rgb[3 * i], rgba + 4 * i, 3);
  int orientation = 1;
  WebPChunkIterator chunk;
  const WebPDemuxer* demux = WebPAnimDecoderGetDemuxer(r.decoder);
  if (WebPDemuxGetChunk(demux, "EXIF", 1, &chunk)) {  // Pillow: info["exif"] = the EXIF chunk
    orientation = exif_orientation({chunk.chunk.bytes, chunk.chunk.size});
    WebPDemuxReleaseChunkIterator(&chunk);
  }
  return apply_orientation(std::move(image), orientation);
}

}  // namespace kylin::io::detail::webp
