// JPEG through libjpeg-turbo, to the pixels Pillow's JpegImagePlugin + convert("RGB") gives. Its
// setjmp/longjmp error handling stays in the plain functions of this file, whose frames own nothing.
#pragma once

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>
// jmorecfg.h's generic names, which would leak into every file that decodes images.
#undef LOCAL
#undef GLOBAL
#undef EXTERN
#undef METHODDEF
#undef FAR

#include "kylin/io/image_decode_common.hpp"

namespace kylin::io::detail::jpeg {

// Legitimate progressive files have about ten scans; a file of thousands of tiny scans makes
// libjpeg redo the whole image each time (a CPU bomb), so more than this is refused.
inline constexpr int max_scans = 256;

struct Errors {
  jpeg_error_mgr pub;  // first: libjpeg's cinfo->err points here
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  bool rows_done;
  char message[JMSG_LENGTH_MAX + 64];
};

[[noreturn]] inline void fail(j_common_ptr c, const char* message) {
  auto* e = reinterpret_cast<Errors*>(c->err);
  std::snprintf(e->message, sizeof e->message, "%s", message);
  std::longjmp(e->jump, 1);
}

[[noreturn]] inline void on_error_exit(j_common_ptr c) {
  char text[JMSG_LENGTH_MAX];
  (*c->err->format_message)(c, text);
  fail(c, text);
}

// Warnings (corrupt data libjpeg works around) do not stop Pillow either; running out of data
// before the last row does: Pillow reports "image file is truncated" (ImageFile.load).
inline void on_message(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF && !reinterpret_cast<Errors*>(c->err)->rows_done)
    fail(c, "the file is truncated");
}

inline void on_progress(j_common_ptr c) {
  if (reinterpret_cast<j_decompress_ptr>(c)->input_scan_number > max_scans) fail(c, "more than 256 scans");
}

inline bool read_header(jpeg_decompress_struct* d, Errors* e, const std::uint8_t* data, std::size_t size,
                        std::size_t memory) {
  if (setjmp(e->jump)) return false;
  jpeg_create_decompress(d);
  d->progress = &e->progress;
  d->mem->max_memory_to_use = static_cast<long>(memory);  // the whole-image buffers of progressive files
  jpeg_mem_src(d, data, static_cast<unsigned long>(size));
  jpeg_save_markers(d, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(d, 1);  // an image is required
  return true;
}

// Pillow reads 4 components as "CMYK;I" (JpegImagePlugin: "assume adobe conventions", every
// 4-component file, Adobe marker or not), i.e. each decoded sample inverted, and YCCK as libjpeg's
// CMYK of it; convert("RGB") is cmyk2rgb in libImaging/Convert.c: nk = 255 - k,
// out = CLIP8(nk - MULDIV255(c, nk)), MULDIV255(a, b) = (((t >> 8) + t) >> 8) with t = a*b + 128.
inline void cmyk_row(const std::uint8_t* in, std::uint8_t* out, std::size_t width) {
  for (std::size_t x = 0; x < width; ++x, in += 4, out += 3) {
    const int nk = 255 - (255 - in[3]);  // Pillow's k is the inverted sample
    for (int i = 0; i < 3; ++i) {
      const int t = (255 - in[i]) * nk + 128;
      const int v = nk - (((t >> 8) + t) >> 8);
      out[i] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

inline bool read_pixels(jpeg_decompress_struct* d, Errors* e, std::uint8_t* out, std::uint8_t* row) {
  if (setjmp(e->jump)) return false;
  jpeg_start_decompress(d);
  const int channels = d->out_color_space == JCS_GRAYSCALE ? 1 : d->out_color_space == JCS_CMYK ? 4 : 3;
  if (d->output_components != channels || d->output_width != d->image_width || d->output_height != d->image_height)
    fail(reinterpret_cast<j_common_ptr>(d), "unexpected output layout");
  const std::size_t width = d->output_width;
  while (d->output_scanline < d->output_height) {
    std::uint8_t* dst = out + std::size_t{d->output_scanline} * width * 3;
    JSAMPROW src = channels == 3 ? dst : row;
    if (jpeg_read_scanlines(d, &src, 1) != 1) fail(reinterpret_cast<j_common_ptr>(d), "the file is truncated");
    if (channels == 1)
      for (std::size_t x = 0; x < width; ++x) std::memset(dst + 3 * x, row[x], 3);  // "L" replicated
    if (channels == 4) cmyk_row(row, dst, width);
  }
  e->rows_done = true;
  jpeg_finish_decompress(d);
  return true;
}

struct Reader {
  jpeg_decompress_struct d{};
  Errors e{};
  ~Reader() { jpeg_destroy_decompress(&d); }  // safe on the zeroed struct: frees only what exists
};

// The EXIF Pillow reads: the first APP1 "Exif\0\0" segment, later ones appended without their prefix.
inline std::vector<std::uint8_t> exif_of(const jpeg_decompress_struct& d) {
  std::vector<std::uint8_t> exif;
  for (jpeg_saved_marker_ptr m = d.marker_list; m; m = m->next) {
    if (m->marker != JPEG_APP0 + 1 || m->data_length < 6 || std::memcmp(m->data, "Exif\0\0", 6) != 0) continue;
    exif.insert(exif.end(), m->data + (exif.empty() ? 0 : 6), m->data + m->data_length);
  }
  return exif;
}

inline vision::Image decode(std::span<const std::uint8_t> bytes, std::string_view what, const ImageLimits& limits) {
  Reader r;
  r.d.err = jpeg_std_error(&r.e.pub);
  r.e.pub.error_exit = on_error_exit;
  r.e.pub.emit_message = on_message;
  r.e.progress.progress_monitor = on_progress;
  const auto failed = [&] { image_error(what, std::string("invalid JPEG: ") + r.e.message); };
  // Coefficients of a progressive file: 128 bytes a block, up to 4 components at full resolution.
  const std::size_t memory = static_cast<std::size_t>(limits.max_pixels) * 8 + (std::size_t{64} << 20);
  if (!read_header(&r.d, &r.e, bytes.data(), bytes.size(), memory)) failed();
  check_image_size(r.d.image_width, r.d.image_height, limits, what, "JPEG");
  const int n = r.d.num_components;
  if (n != 1 && n != 3 && n != 4) image_error(what, "JPEG with " + std::to_string(n) + " components (taken: 1, 3, 4)");
  r.d.out_color_space = n == 1 ? JCS_GRAYSCALE : n == 3 ? JCS_RGB : JCS_CMYK;
  vision::Image image = blank_image(r.d.image_width, r.d.image_height);
  std::vector<std::uint8_t> row(std::size_t{r.d.image_width} * 4);
  const std::vector<std::uint8_t> exif = exif_of(r.d);
  if (!read_pixels(&r.d, &r.e, image.rgb.data(), row.data())) failed();
  return apply_orientation(std::move(image), exif_orientation(exif));
}

}  // namespace kylin::io::detail::jpeg
