// PNG through libpng, to the pixels Pillow's PngImagePlugin + convert("RGB") gives: libpng's
// setjmp/longjmp error handling stays in the plain functions of this file, whose frames own nothing.
#pragma once

#include <png.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "kylin/io/image_decode_common.hpp"

namespace kylin::io::detail::png {

// The error pointer and the io pointer of the png_struct: the input, and libpng's last error text.
struct Source {
  const std::uint8_t* data;
  std::size_t size, pos;
  char message[256];
};

inline void on_error(png_structp png, png_const_charp message) {
  auto* src = static_cast<Source*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", message);
  png_longjmp(png, 1);
}

inline void on_warning(png_structp, png_const_charp) {}  // Pillow does not stop on these either

inline void on_read(png_structp png, png_bytep out, std::size_t n) {
  auto* src = static_cast<Source*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "the file is truncated");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

struct Header {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
};

inline void configure(png_structp png);

inline bool read_header(png_structp png, png_infop info, Header* h) {
  if (setjmp(png_jmpbuf(png))) return false;
  configure(png);
  png_read_info(png, info);
  png_get_IHDR(png, info, &h->width, &h->height, &h->bit_depth, &h->color_type, nullptr, nullptr, nullptr);
  return true;
}

// 16-bit grayscale (no alpha) stays 2 bytes a sample, big-endian: Pillow's mode "I;16" (older: "I")
// clips it to 255 on convert("RGB") (I16_RGB / i2rgb in libImaging/Convert.c), which libpng cannot
// do. Everything else libpng turns into 8-bit RGB: palette expanded (png_set_PLTE zero-fills the
// entries past PLTE, as Pillow's ImagingPaletteNew does in libImaging/Palette.c), 1/2/4-bit gray
// scaled to 0..255 (Pillow's "1", "L;2", "L;4" unpackers), 16-bit samples by their high byte
// (Pillow's "RGB;16B", "RGBA;16B", "LA;16B" in libImaging/Unpack.c), alpha and tRNS dropped
// (convert("RGB") drops alpha, not composited), gray replicated.
inline bool read_pixels(png_structp png, png_infop info, const Header* h, png_bytep* rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  const bool gray16 = h->bit_depth == 16 && h->color_type == PNG_COLOR_TYPE_GRAY;
  if (!gray16) {
    if (h->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (h->color_type == PNG_COLOR_TYPE_GRAY && h->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (h->bit_depth == 16) png_set_strip_16(png);
    png_set_strip_alpha(png);
    if ((h->color_type & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != std::size_t{h->width} * (gray16 ? 2 : 3)) png_error(png, "unexpected row layout");
  png_read_image(png, rows);
  return true;
}

inline bool read_end(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_end(png, info);
  return true;
}

struct Reader {
  Source src{};
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~Reader() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

inline void configure(png_structp png) {
  png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);  // the caller's limits, checked after the header
  png_set_chunk_malloc_max(png, 8u << 20);                     // eXIf, compressed metadata
  png_set_chunk_cache_max(png, 256);
  // Metadata that does not change the pixels: not inflated at all (zTXt/iCCP bombs).
  static const png_byte ignored[] = "iCCP\0tEXt\0zTXt\0iTXt\0sPLT";
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, ignored, 5);
}

inline vision::Image decode(std::span<const std::uint8_t> bytes, std::string_view what, const ImageLimits& limits) {
  Reader r;
  r.src = Source{bytes.data(), bytes.size(), 0, {}};
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r.src, on_error, on_warning);
  if (r.png) r.info = png_create_info_struct(r.png);
  if (!r.png || !r.info) image_error(what, "PNG: out of memory");
  png_set_read_fn(r.png, &r.src, on_read);
  const auto fail = [&] { image_error(what, std::string("invalid PNG: ") + r.src.message); };
  Header h;
  if (!read_header(r.png, r.info, &h)) fail();
  check_image_size(h.width, h.height, limits, what, "PNG");
  vision::Image image = blank_image(h.width, h.height);
  const bool gray16 = h.bit_depth == 16 && h.color_type == PNG_COLOR_TYPE_GRAY;
  std::vector<std::uint8_t> gray(gray16 ? image.rgb.size() / 3 * 2 : 0);
  std::vector<png_bytep> rows(h.height);
  for (std::size_t y = 0; y < rows.size(); ++y)
    rows[y] = gray16 ? &gray[y * h.width * 2] : &image.rgb[y * h.width * 3];
  if (!read_pixels(r.png, r.info, &h, rows.data())) fail();
  for (std::size_t i = 0; i < gray.size() / 2; ++i)
    std::memset(&image.rgb[i * 3], gray[2 * i] ? 255 : gray[2 * i + 1], 3);
  // The pixels are complete: a damaged or missing tail (IEND) is ignored, as Pillow's load_end does.
  read_end(r.png, r.info);
  png_bytep exif = nullptr;
  png_uint_32 exif_size = 0;
  if (png_get_eXIf_1(r.png, r.info, &exif_size, &exif) && exif)
    return apply_orientation(std::move(image), exif_orientation({exif, exif_size}));
  return image;
}

}  // namespace kylin::io::detail::png
