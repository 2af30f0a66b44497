// GIF's first frame through giflib, placed as Pillow's GifImagePlugin places it (frame 0 of
// _seek/load_prepare), then mapped through its palette as convert("RGB") does.
#pragma once

#include <gif_lib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "kylin/io/image_decode_common.hpp"

namespace kylin::io::detail::gif {

struct Source {
  const std::uint8_t* data;
  std::size_t size, pos;
};

inline int on_read(GifFileType* file, GifByteType* out, int n) {
  auto* src = static_cast<Source*>(file->UserData);
  const std::size_t k = std::min(static_cast<std::size_t>(std::max(n, 0)), src->size - src->pos);
  std::memcpy(out, src->data + src->pos, k);
  src->pos += k;
  return static_cast<int>(k);  // short: giflib's read error, which is what truncation is
}

struct Reader {
  GifFileType* file = nullptr;
  ~Reader() {
    int error = 0;
    if (file) DGifCloseFile(file, &error);
  }
};

[[noreturn]] inline void fail(std::string_view what, int code) {
  const char* text = GifErrorString(code);
  image_error(what, std::string("invalid GIF: ") + (text ? text : "unknown error") + " (truncated or corrupt)");
}

// Pillow keeps a palette only when it is not the identity gray ramp (_is_palette_needed); without
// one the frame is mode "L" and each index is its own gray level. With one, indices past the
// table's end map to black (libImaging/Palette.c zero-fills the 256 entries).
inline std::array<std::uint8_t, 768> colors_of(const ColorMapObject* map) {
  std::array<std::uint8_t, 768> colors{};
  bool identity = true;
  const int n = map ? std::min(map->ColorCount, 256) : 0;
  for (int i = 0; i < n; ++i) {
    const GifColorType c = map->Colors[i];
    identity = identity && c.Red == i && c.Green == i && c.Blue == i;
    colors[3 * i] = c.Red, colors[3 * i + 1] = c.Green, colors[3 * i + 2] = c.Blue;
  }
  if (identity)
    for (int i = 0; i < 256; ++i) colors[3 * i] = colors[3 * i + 1] = colors[3 * i + 2] = static_cast<std::uint8_t>(i);
  return colors;
}

// Up to the first image descriptor; returns the graphic control extension's transparent index or -1.
inline int skip_to_image(GifFileType* file, std::string_view what) {
  int transparency = -1;
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(file, &type) == GIF_ERROR) fail(what, file->Error);
    if (type == IMAGE_DESC_RECORD_TYPE) return transparency;
    if (type == TERMINATE_RECORD_TYPE) image_error(what, "invalid GIF: no image in the file");
    int code = 0;
    GifByteType* block = nullptr;
    if (DGifGetExtension(file, &code, &block) == GIF_ERROR) fail(what, file->Error);
    if (code == GRAPHICS_EXT_FUNC_CODE && block && block[0] >= 4 && (block[1] & 1)) transparency = block[4];
    while (block)
      if (DGifGetExtensionNext(file, &block) == GIF_ERROR) fail(what, file->Error);
  }
}

inline vision::Image decode(std::span<const std::uint8_t> bytes, std::string_view what, const ImageLimits& limits) {
  Source src{bytes.data(), bytes.size(), 0};
  int error = 0;
  Reader r;
  r.file = DGifOpen(&src, on_read, &error);
  if (!r.file) fail(what, error);
  const int transparency = skip_to_image(r.file, what);
  if (DGifGetImageDesc(r.file) == GIF_ERROR) fail(what, r.file->Error);
  const GifImageDesc frame = r.file->Image;
  // Pillow grows the canvas to hold a frame reaching past the logical screen.
  const std::int64_t width = std::max<std::int64_t>(r.file->SWidth, std::int64_t{frame.Left} + frame.Width);
  const std::int64_t height = std::max<std::int64_t>(r.file->SHeight, std::int64_t{frame.Top} + frame.Height);
  check_image_size(width, height, limits, what, "GIF");
  // Outside the frame: the transparent index when there is one, else index 0 (load_prepare).
  std::vector<std::uint8_t> indices(static_cast<std::size_t>(width * height), transparency >= 0 ? transparency : 0);
  std::vector<GifPixelType> line(static_cast<std::size_t>(frame.Width));
  static constexpr int start[] = {0, 4, 2, 1}, step[] = {8, 8, 4, 2};  // the interlaced passes
  for (int pass = frame.Interlace ? 0 : 3; pass < 4 && frame.Width > 0; ++pass) {
    for (int y = frame.Interlace ? start[pass] : 0; y < frame.Height; y += frame.Interlace ? step[pass] : 1) {
      if (DGifGetLine(r.file, line.data(), frame.Width) == GIF_ERROR) fail(what, r.file->Error);
      std::memcpy(&indices[static_cast<std::size_t>((frame.Top + y) * width + frame.Left)], line.data(), line.size());
    }
  }
  const auto colors = colors_of(frame.ColorMap ? frame.ColorMap : r.file->SColorMap);
  vision::Image image = blank_image(width, height);
  for (std::size_t i = 0; i < indices.size(); ++i) std::memcpy(&image.rgb[3 * i], &colors[3 * indices[i]], 3);
  return image;
}

}  // namespace kylin::io::detail::gif
