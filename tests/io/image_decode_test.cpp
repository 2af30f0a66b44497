// decode_image: the test images and their resized copies (sums from the HF reference), files of each
// odd kind built here with the libraries' own encoders, and hostile inputs, which give a named
// request error (or a valid image), never a crash or an allocation sized from the header.
#include "kylin/io/image_decode.hpp"

#include <doctest/doctest.h>
#include <gif_lib.h>
#include <jpeglib.h>
#include <png.h>
#include <webp/encode.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "common/read_text.hpp"
#include "kylin/core/json.hpp"

namespace image_decode_test {

using kylin::io::decode_image;
using kylin::io::ImageLimits;
using kylin::vision::Image;
using Bytes = std::vector<std::uint8_t>;

const std::string data = KYLIN_TEST_DATA;

Bytes read_file(const std::string& path) {
  const std::string s = kylin::test::read_text(path);
  return Bytes(s.begin(), s.end());
}

// The message of the request error that decoding throws (and checks its category and context).
std::string error_of(const Bytes& bytes, const ImageLimits& limits = {}) {
  try {
    decode_image(bytes, "input.image", limits);
  } catch (const kylin::Error& e) {
    CHECK(e.category() == kylin::ErrorCategory::request);
    CHECK(e.context() == "input.image");
    return e.message();
  }
  return "(no error)";
}

// Decoding either throws the request error or gives an image of consistent size.
void decodes_or_errors(const Bytes& bytes, const ImageLimits& limits = {}) {
  try {
    const Image im = decode_image(bytes, "input.image", limits);
    REQUIRE(im.width > 0);
    REQUIRE(im.height > 0);
    REQUIRE(im.rgb.size() == static_cast<std::size_t>(im.width * im.height * 3));
  } catch (const kylin::Error& e) {
    REQUIRE(e.category() == kylin::ErrorCategory::request);
  }
}

std::uint64_t sum(const Image& im) { return std::accumulate(im.rgb.begin(), im.rgb.end(), std::uint64_t{0}); }

// A w x h RGB image whose every pixel differs: (x*37+y*11, x*5+y*53+7, x*y+3) mod 256.
Image pattern(int w, int h) {
  Image im;
  im.width = w;
  im.height = h;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int v : {x * 37 + y * 11, x * 5 + y * 53 + 7, x * y + 3}) im.rgb.push_back(static_cast<std::uint8_t>(v & 255));
  return im;
}

// --- PNG, written with libpng ---------------------------------------------------------------
void png_write_to(png_structp png, png_bytep p, std::size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), p, p + n);
}
void png_fail(png_structp, png_const_charp m) {
  std::fprintf(stderr, "test PNG encoder: %s\n", m);
  std::abort();  // the test's own encoding of valid data: cannot happen
}

struct PngSpec {
  int width = 0, height = 0, color_type = PNG_COLOR_TYPE_RGB, bit_depth = 8;
  Bytes samples{};  // rows of packed samples as the PNG stores them (16-bit: big-endian)
  std::vector<png_color> palette{};
  Bytes trns{};         // palette alpha
  int trns_gray = -1;   // a gray tRNS value
  Bytes exif{};         // an eXIf chunk
  bool interlace = false;
};

Bytes encode_png(const PngSpec& s) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, png_fail, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, png_write_to, nullptr);
  png_set_IHDR(png, info, s.width, s.height, s.bit_depth, s.color_type,
               s.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), static_cast<int>(s.palette.size()));
  if (!s.trns.empty()) png_set_tRNS(png, info, s.trns.data(), static_cast<int>(s.trns.size()), nullptr);
  if (s.trns_gray >= 0) {
    png_color_16 c{};
    c.gray = static_cast<png_uint_16>(s.trns_gray);
    png_set_tRNS(png, info, nullptr, 0, &c);
  }
  if (!s.exif.empty()) png_set_eXIf_1(png, info, static_cast<png_uint_32>(s.exif.size()), const_cast<png_bytep>(s.exif.data()));
  png_write_info(png, info);
  const std::size_t stride = s.samples.size() / static_cast<std::size_t>(s.height);
  std::vector<png_bytep> rows;
  for (int y = 0; y < s.height; ++y) rows.push_back(const_cast<png_bytep>(&s.samples[y * stride]));
  png_write_image(png, rows.data());
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return out;
}

Bytes rgb_png(const Image& im) {
  return encode_png({.width = static_cast<int>(im.width), .height = static_cast<int>(im.height), .samples = im.rgb});
}

// libpng's simplified API, an independent path to the same 8-bit RGB pixels.
Bytes png_simplified_rgb(const Bytes& file) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  const bool begun = png_image_begin_read_from_memory(&image, file.data(), file.size());
  REQUIRE(begun);
  image.format = PNG_FORMAT_RGB;
  Bytes out(PNG_IMAGE_SIZE(image));
  const bool read = png_image_finish_read(&image, nullptr, out.data(), 0, nullptr);
  REQUIRE(read);
  return out;
}

// A PNG chunk with its CRC, for files no encoder would write.
void put_chunk(Bytes& out, const char* type, const Bytes& body) {
  const auto be32 = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
  };
  be32(static_cast<std::uint32_t>(body.size()));
  const std::size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), body.begin(), body.end());
  be32(static_cast<std::uint32_t>(crc32(0, &out[start], static_cast<uInt>(out.size() - start))));
}

// An 8-bit RGB PNG declaring w x h whose IDAT inflates to `inflated` zero bytes (a bomb when large).
Bytes declared_png(std::uint32_t w, std::uint32_t h, std::size_t inflated) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  for (std::uint32_t v : {w, h})
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(static_cast<std::uint8_t>(v >> s));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  put_chunk(out, "IHDR", ihdr);
  const Bytes zeros(inflated, 0);
  uLongf n = compressBound(static_cast<uLong>(zeros.size()));
  Bytes idat(n);
  const int status = compress2(idat.data(), &n, zeros.data(), static_cast<uLong>(zeros.size()), 9);
  REQUIRE(status == Z_OK);
  idat.resize(n);
  put_chunk(out, "IDAT", idat);
  put_chunk(out, "IEND", {});
  return out;
}

// A little-endian TIFF header + IFD0 holding Orientation (SHORT) = o, as an eXIf chunk carries it.
Bytes exif_with_orientation(int o, bool big_endian = false) {
  if (big_endian) return {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, static_cast<std::uint8_t>(o), 0, 0, 0, 0, 0, 0, 0, 0};
  return {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, static_cast<std::uint8_t>(o), 0, 0, 0, 0, 0, 0, 0};
}

// The pixel (x, y) of an image as one 0xRRGGBB number.
std::uint32_t px(const Image& im, std::int64_t x, std::int64_t y) {
  return static_cast<std::uint32_t>(im.at(y, x, 0) << 16 | im.at(y, x, 1) << 8 | im.at(y, x, 2));
}

// --- JPEG, written with libjpeg (quality 100, no chroma subsampling) --------------------------
struct JpegSpec {
  int width = 0, height = 0, components = 3;  // 1 gray, 3 RGB, 4 CMYK
  Bytes samples{};
  bool ycck = false, progressive = false;
  Bytes exif{};  // written as APP1 "Exif\0\0" + exif
  int quality = 100;
};

Bytes encode_jpeg(const JpegSpec& s) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);  // its error_exit exits: the test's own valid data cannot fail
  jpeg_create_compress(&c);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buffer, &size);
  c.image_width = static_cast<JDIMENSION>(s.width);
  c.image_height = static_cast<JDIMENSION>(s.height);
  c.input_components = s.components;
  c.in_color_space = s.components == 1 ? JCS_GRAYSCALE : s.components == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&c);
  if (s.ycck) jpeg_set_colorspace(&c, JCS_YCCK);
  jpeg_set_quality(&c, s.quality, 1);
  for (int i = 0; i < c.num_components; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  if (s.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, 1);
  if (!s.exif.empty()) {
    Bytes app1 = {'E', 'x', 'i', 'f', 0, 0};
    app1.insert(app1.end(), s.exif.begin(), s.exif.end());
    jpeg_write_marker(&c, JPEG_APP0 + 1, app1.data(), static_cast<unsigned>(app1.size()));
  }
  const std::size_t stride = static_cast<std::size_t>(s.width * s.components);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(&s.samples[c.next_scanline * stride]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

// The largest difference of one sample, and the mean, between two images of the same size.
std::pair<int, double> difference(const Image& a, const Image& b) {
  REQUIRE(a.rgb.size() == b.rgb.size());
  int most = 0;
  double total = 0;
  for (std::size_t i = 0; i < a.rgb.size(); ++i) {
    const int d = std::abs(int{a.rgb[i]} - int{b.rgb[i]});
    most = std::max(most, d);
    total += d;
  }
  return {most, total / static_cast<double>(a.rgb.size())};
}

// A smooth w x h image (what lossy codecs keep well).
Image gradient(int w, int h) {
  Image im;
  im.width = w;
  im.height = h;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int v : {x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)}) im.rgb.push_back(static_cast<std::uint8_t>(v));
  return im;
}

// --- WebP, written with libwebp ---------------------------------------------------------------
Bytes webp_lossless(const Image& im) {
  std::uint8_t* out = nullptr;
  const std::size_t n = WebPEncodeLosslessRGB(im.rgb.data(), static_cast<int>(im.width), static_cast<int>(im.height),
                                              static_cast<int>(im.width * 3), &out);
  REQUIRE(n > 0);
  Bytes b(out, out + n);
  WebPFree(out);
  return b;
}

void put_le(Bytes& out, std::uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

// The extended container: VP8X declaring a w x h canvas, the image chunk of `simple` (a simple-format
// file), and an EXIF chunk when given.
Bytes webp_extended(const Bytes& simple, std::uint32_t w, std::uint32_t h, const Bytes& exif) {
  Bytes body = {'W', 'E', 'B', 'P', 'V', 'P', '8', 'X'};
  put_le(body, 10, 4);
  body.push_back(exif.empty() ? 0 : 0x08);
  body.insert(body.end(), 3, 0);
  put_le(body, w - 1, 3);
  put_le(body, h - 1, 3);
  body.insert(body.end(), simple.begin() + 12, simple.end());
  if (!exif.empty()) {
    body.insert(body.end(), {'E', 'X', 'I', 'F'});
    put_le(body, static_cast<std::uint32_t>(exif.size()), 4);
    body.insert(body.end(), exif.begin(), exif.end());
    if (exif.size() % 2) body.push_back(0);
  }
  Bytes out = {'R', 'I', 'F', 'F'};
  put_le(out, static_cast<std::uint32_t>(body.size()), 4);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

// --- GIF, written with giflib -----------------------------------------------------------------
int gif_write_to(GifFileType* gif, const GifByteType* p, int n) {
  auto* out = static_cast<Bytes*>(gif->UserData);
  out->insert(out->end(), p, p + n);
  return n;
}

struct GifSpec {
  int screen_w = 0, screen_h = 0;
  std::vector<GifColorType> global{}, local{};  // sizes: powers of two
  int left = 0, top = 0, width = 0, height = 0;
  Bytes indices{};  // width x height, rows top to bottom
  int transparent = -1;
  bool interlace = false;
};

Bytes encode_gif(const GifSpec& s) {
  Bytes out;
  int error = 0;
  GifFileType* gif = EGifOpen(&out, gif_write_to, &error);
  REQUIRE(gif);
  const auto map = [](const std::vector<GifColorType>& c) {
    return c.empty() ? nullptr : GifMakeMapObject(static_cast<int>(c.size()), c.data());
  };
  ColorMapObject* global = map(s.global);
  ColorMapObject* local = map(s.local);
  EGifSetGifVersion(gif, true);
  bool ok = EGifPutScreenDesc(gif, s.screen_w, s.screen_h, 8, 0, global) == GIF_OK;
  if (s.transparent >= 0) {
    const GifByteType gce[4] = {1, 0, 0, static_cast<GifByteType>(s.transparent)};
    ok = ok && EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, 4, gce) == GIF_OK;
  }
  ok = ok && EGifPutImageDesc(gif, s.left, s.top, s.width, s.height, s.interlace, local) == GIF_OK;
  std::vector<int> order;  // the rows in the order the file stores them
  if (s.interlace) {
    for (auto [start, step] : {std::pair{0, 8}, {4, 8}, {2, 4}, {1, 2}})
      for (int y = start; y < s.height; y += step) order.push_back(y);
  } else {
    for (int y = 0; y < s.height; ++y) order.push_back(y);
  }
  for (int y : order) ok = ok && EGifPutLine(gif, const_cast<GifPixelType*>(&s.indices[y * s.width]), s.width) == GIF_OK;
  ok = EGifCloseFile(gif, &error) == GIF_OK && ok;
  REQUIRE(ok);
  GifFreeMapObject(global);
  GifFreeMapObject(local);
  return out;
}

}  // namespace image_decode_test

using namespace image_decode_test;

TEST_CASE("image decode: the test PNGs decode to the reference sizes; the resized ones to the reference sums") {
  const auto ref = kylin::json::parse(kylin::test::read_text(data + "/reference/tiny-qwen35-vl.json"));
  int seen = 0;
  for (const auto& c : ref.find("cases")->as_array()) {
    for (const auto& entry : c.find("images")->as_array()) {
      const std::string file = entry.find("file")->as_string();
      CAPTURE(file);
      const Bytes bytes = read_file(data + "/" + file);
      const Image im = decode_image(bytes, file);
      CHECK(im.width == entry.find("width")->as_int());
      CHECK(im.height == entry.find("height")->as_int());
      CHECK(im.rgb == png_simplified_rgb(bytes));  // libpng's other path, the same pixels
      const std::string resized = entry.find("resized_png")->as_string();
      const Image r = decode_image(read_file(data + "/" + resized), resized);
      CHECK(r.width == entry.find("resized_width")->as_int());
      CHECK(r.height == entry.find("resized_height")->as_int());
      const auto& variants = *entry.find("resize_variants");
      CHECK(sum(r) == static_cast<std::uint64_t>(variants.find("torch_u8")->find("sum")->as_int()));
      ++seen;
    }
  }
  CHECK(seen >= 3);
}

TEST_CASE("image decode: PNG color types map to Pillow's convert(\"RGB\") pixels") {
  SUBCASE("8-bit RGB, plain and interlaced") {
    const Image p = pattern(13, 7);
    CHECK(decode_image(rgb_png(p), "x").rgb == p.rgb);
    PngSpec s{.width = 13, .height = 7, .samples = p.rgb, .interlace = true};
    CHECK(decode_image(encode_png(s), "x").rgb == p.rgb);
  }
  SUBCASE("palette, 2-bit, tRNS dropped; an index past PLTE is black (Pillow's zero-filled palette)") {
    // indices 0 1 2 3 packed 2 bits each, 4 pixels in one byte: 00 01 10 11
    PngSpec s{.width = 4, .height = 1, .color_type = PNG_COLOR_TYPE_PALETTE, .bit_depth = 2, .samples = {0x1B},
              .palette = {{10, 20, 30}, {200, 100, 50}, {1, 2, 3}}, .trns = {0, 128}};
    const Image im = decode_image(encode_png(s), "x");
    CHECK(im.width == 4);
    CHECK(px(im, 0, 0) == 0x0A141E);
    CHECK(px(im, 1, 0) == 0xC86432);
    CHECK(px(im, 2, 0) == 0x010203);
    CHECK(px(im, 3, 0) == 0x000000);
  }
  SUBCASE("gray 8-bit replicated, gray tRNS ignored") {
    PngSpec s{.width = 3, .height = 1, .color_type = PNG_COLOR_TYPE_GRAY, .samples = {0, 77, 255}, .trns_gray = 77};
    const Image im = decode_image(encode_png(s), "x");
    CHECK(im.rgb == Bytes{0, 0, 0, 77, 77, 77, 255, 255, 255});
  }
  SUBCASE("gray 1-bit is 0 or 255, 4-bit is v * 17") {
    PngSpec one{.width = 8, .height = 1, .color_type = PNG_COLOR_TYPE_GRAY, .bit_depth = 1, .samples = {0xA0}};
    const Image a = decode_image(encode_png(one), "x");
    CHECK(px(a, 0, 0) == 0xFFFFFF);
    CHECK(px(a, 1, 0) == 0);
    CHECK(px(a, 2, 0) == 0xFFFFFF);
    CHECK(px(a, 7, 0) == 0);
    PngSpec four{.width = 2, .height = 1, .color_type = PNG_COLOR_TYPE_GRAY, .bit_depth = 4, .samples = {0x3F}};
    CHECK(decode_image(encode_png(four), "x").rgb == Bytes{51, 51, 51, 255, 255, 255});
  }
  SUBCASE("RGBA and gray+alpha: alpha dropped, not composited") {
    PngSpec rgba{.width = 2, .height = 1, .color_type = PNG_COLOR_TYPE_RGBA, .samples = {10, 20, 30, 0, 40, 50, 60, 128}};
    CHECK(decode_image(encode_png(rgba), "x").rgb == Bytes{10, 20, 30, 40, 50, 60});
    PngSpec ga{.width = 2, .height = 1, .color_type = PNG_COLOR_TYPE_GRAY_ALPHA, .samples = {90, 0, 7, 255}};
    CHECK(decode_image(encode_png(ga), "x").rgb == Bytes{90, 90, 90, 7, 7, 7});
  }
  SUBCASE("16-bit RGB, RGBA and gray+alpha: the high byte (Pillow's RGB;16B, RGBA;16B, LA;16B)") {
    PngSpec rgb{.width = 1, .height = 1, .bit_depth = 16, .samples = {0x12, 0xFF, 0x00, 0x80, 0xAB, 0x01}};
    CHECK(decode_image(encode_png(rgb), "x").rgb == Bytes{0x12, 0x00, 0xAB});
    PngSpec rgba{.width = 1, .height = 1, .color_type = PNG_COLOR_TYPE_RGBA, .bit_depth = 16,
                 .samples = {0x12, 0xFF, 0x00, 0x80, 0xAB, 0x01, 0, 0}};
    CHECK(decode_image(encode_png(rgba), "x").rgb == Bytes{0x12, 0x00, 0xAB});
    PngSpec ga{.width = 1, .height = 1, .color_type = PNG_COLOR_TYPE_GRAY_ALPHA, .bit_depth = 16, .samples = {0x9A, 0xBC, 0x01, 0x02}};
    CHECK(decode_image(encode_png(ga), "x").rgb == Bytes{0x9A, 0x9A, 0x9A});
  }
  SUBCASE("16-bit gray: Pillow's I;16 clipped to 255, not scaled") {
    PngSpec s{.width = 4, .height = 1, .color_type = PNG_COLOR_TYPE_GRAY, .bit_depth = 16,
              .samples = {0x00, 0x05, 0x00, 0xFF, 0x01, 0x00, 0x12, 0x34}};
    CHECK(decode_image(encode_png(s), "x").rgb == Bytes{5, 5, 5, 255, 255, 255, 255, 255, 255, 255, 255, 255});
  }
}

TEST_CASE("image decode: EXIF orientation 1-8 (PNG eXIf) as Pillow's exif_transpose") {
  // A 3 x 2 image, pixel (x, y) = 0x0000<y><x>:
  //   00 01 02
  //   10 11 12
  Image src;
  src.width = 3;
  src.height = 2;
  for (int y = 0; y < 2; ++y)
    for (int x = 0; x < 3; ++x) src.rgb.insert(src.rgb.end(), {0, static_cast<std::uint8_t>(y), static_cast<std::uint8_t>(x)});
  // The rows each orientation gives, written out by hand from the transposes' definitions.
  const std::vector<std::vector<std::vector<int>>> expected = {
      {{0x000, 0x001, 0x002}, {0x100, 0x101, 0x102}},  // 1
      {{0x002, 0x001, 0x000}, {0x102, 0x101, 0x100}},  // 2 mirror left-right
      {{0x102, 0x101, 0x100}, {0x002, 0x001, 0x000}},  // 3 rotate 180
      {{0x100, 0x101, 0x102}, {0x000, 0x001, 0x002}},  // 4 mirror top-bottom
      {{0x000, 0x100}, {0x001, 0x101}, {0x002, 0x102}},  // 5 transpose
      {{0x100, 0x000}, {0x101, 0x001}, {0x102, 0x002}},  // 6 rotate 90 clockwise
      {{0x102, 0x002}, {0x101, 0x001}, {0x100, 0x000}},  // 7 transverse
      {{0x002, 0x102}, {0x001, 0x101}, {0x000, 0x100}},  // 8 rotate 90 counter-clockwise
  };
  for (int o = 1; o <= 8; ++o) {
    for (bool big_endian : {false, true}) {
      CAPTURE(o);
      CAPTURE(big_endian);
      PngSpec s{.width = 3, .height = 2, .samples = src.rgb, .exif = exif_with_orientation(o, big_endian)};
      const Image im = decode_image(encode_png(s), "x");
      const auto& rows = expected[static_cast<std::size_t>(o - 1)];
      REQUIRE(im.height == static_cast<std::int64_t>(rows.size()));
      REQUIRE(im.width == static_cast<std::int64_t>(rows[0].size()));
      for (std::size_t y = 0; y < rows.size(); ++y)
        for (std::size_t x = 0; x < rows[y].size(); ++x) CHECK(px(im, x, y) == static_cast<std::uint32_t>(rows[y][x]));
    }
  }
  // Out of range or malformed: no orientation.
  for (const Bytes& exif : {exif_with_orientation(9), exif_with_orientation(0), Bytes{'I', 'I', 42, 0, 200, 0, 0, 0}}) {
    PngSpec s{.width = 3, .height = 2, .samples = src.rgb, .exif = exif};
    CHECK(decode_image(encode_png(s), "x").rgb == src.rgb);
  }
}

TEST_CASE("image decode: hostile PNG input is a named request error") {
  CHECK(error_of({}).find("empty") != std::string::npos);
  const std::string unknown = error_of({'B', 'M', 1, 2, 3, 4});
  for (const char* f : {"PNG", "JPEG", "WebP", "GIF"}) CHECK(unknown.find(f) != std::string::npos);
  const Bytes small = read_file(data + "/images/b_100x37.png");
  CHECK(error_of(small, {.max_bytes = 100}).find("666 bytes, over the limit of 100") != std::string::npos);
  SUBCASE("every prefix of a PNG: an error or an image, never a crash") {
    for (std::size_t n = 0; n < small.size(); ++n) decodes_or_errors(Bytes(small.begin(), small.begin() + n));
    CHECK(error_of(Bytes(small.begin(), small.begin() + 100)).find("truncated") != std::string::npos);
    // Bytes flipped one at a time, the same.
    for (std::size_t i = 0; i < small.size(); i += 3) {
      Bytes b = small;
      b[i] ^= 0x5A;
      decodes_or_errors(b);
    }
  }
  SUBCASE("declared dimensions over the limits: refused before the pixels are allocated") {
    const std::string side = error_of(declared_png(40000, 16, 100));
    CHECK(side.find("40000x16") != std::string::npos);
    CHECK(side.find("32768") != std::string::npos);
    const std::string pixels = error_of(declared_png(30000, 30000, 100));
    CHECK(pixels.find("30000x30000") != std::string::npos);
    CHECK(pixels.find(std::to_string(64LL << 20)) != std::string::npos);
    CHECK(error_of(declared_png(2000, 2000, 100), {.max_pixels = 1000000}).find("4000000 pixels, over the limit of 1000000") !=
          std::string::npos);
  }
  SUBCASE("a zlib bomb: 16 MB of IDAT zeros in a few KB, declaring 20000 x 20000") {
    const Bytes bomb = declared_png(20000, 20000, 16u << 20);
    CHECK(bomb.size() < 64 * 1024);
    CHECK(error_of(bomb).find("over the limit") != std::string::npos);
    // Declaring less than it inflates to: the image, the excess ignored.
    const Image im = decode_image(declared_png(4, 4, 16u << 20), "x");
    CHECK(im.width == 4);
    CHECK(sum(im) == 0);
  }
}

TEST_CASE("image decode: JPEG (baseline, progressive, gray, CMYK, YCCK) as Pillow reads it") {
  const Image p = gradient(40, 24);
  const Bytes baseline = encode_jpeg({.width = 40, .height = 24, .samples = p.rgb});
  const Image im = decode_image(baseline, "x");
  CHECK(im.width == 40);
  CHECK(im.height == 24);
  const auto [most, mean] = difference(im, p);  // quality 100 is still lossy: loosely
  CHECK(most <= 8);
  CHECK(mean < 1.5);
  // Progressive coding of the same coefficients: the same pixels exactly.
  CHECK(decode_image(encode_jpeg({.width = 40, .height = 24, .samples = p.rgb, .progressive = true}), "x").rgb == im.rgb);
  SUBCASE("gray: replicated") {
    Bytes g;
    for (int i = 0; i < 16 * 8; ++i) g.push_back(static_cast<std::uint8_t>(i * 2));
    const Image gi = decode_image(encode_jpeg({.width = 16, .height = 8, .components = 1, .samples = g}), "x");
    for (std::size_t i = 0; i < g.size(); ++i) {
      CHECK(gi.rgb[3 * i] == gi.rgb[3 * i + 1]);
      CHECK(gi.rgb[3 * i] == gi.rgb[3 * i + 2]);
      CHECK(std::abs(int{gi.rgb[3 * i]} - int{g[i]}) <= 3);
    }
  }
  SUBCASE("CMYK and YCCK: inverted (CMYK;I), then Pillow's cmyk2rgb") {
    // Stored samples (C, M, Y, K) = (255, 155, 55, 200); Pillow inverts them to (0, 100, 200, 55):
    // nk = 200, and 200 - MULDIV255(c, 200) for c = 0, 100, 200 is 200, 122, 43 (worked by hand).
    Bytes cmyk;
    for (int i = 0; i < 16 * 16; ++i) cmyk.insert(cmyk.end(), {255, 155, 55, 200});
    for (bool ycck : {false, true}) {
      CAPTURE(ycck);
      const Image ci = decode_image(encode_jpeg({.width = 16, .height = 16, .components = 4, .samples = cmyk, .ycck = ycck}), "x");
      for (std::int64_t y = 0; y < 16; y += 5)
        for (std::int64_t x = 0; x < 16; x += 5) {
          CHECK(std::abs(ci.at(y, x, 0) - 200) <= 2);
          CHECK(std::abs(ci.at(y, x, 1) - 122) <= 2);
          CHECK(std::abs(ci.at(y, x, 2) - 43) <= 2);
        }
    }
  }
  SUBCASE("EXIF orientation in APP1: the PNG path's transpose of the same pixels") {
    const Image q = pattern(5, 3);
    const Image plain = decode_image(encode_jpeg({.width = 5, .height = 3, .samples = q.rgb}), "x");
    for (int o = 1; o <= 8; ++o) {
      CAPTURE(o);
      const Image turned = decode_image(encode_jpeg({.width = 5, .height = 3, .samples = q.rgb, .exif = exif_with_orientation(o, o % 2)}), "x");
      PngSpec s{.width = 5, .height = 3, .samples = plain.rgb, .exif = exif_with_orientation(o)};
      const Image expected = decode_image(encode_png(s), "x");
      CHECK(turned.width == expected.width);
      CHECK(turned.rgb == expected.rgb);
    }
  }
}

TEST_CASE("image decode: WebP lossless exact, lossy close, alpha dropped, EXIF orientation") {
  const Image p = pattern(17, 9);
  const Image im = decode_image(webp_lossless(p), "x");
  CHECK(im.width == 17);
  CHECK(im.height == 9);
  CHECK(im.rgb == p.rgb);
  SUBCASE("lossy") {
    const Image g = gradient(32, 32);
    std::uint8_t* out = nullptr;
    const std::size_t n = WebPEncodeRGB(g.rgb.data(), 32, 32, 96, 100, &out);
    REQUIRE(n > 0);
    const Image d = decode_image(Bytes(out, out + n), "x");
    WebPFree(out);
    CHECK(difference(d, g).second < 4);
  }
  SUBCASE("RGBA: the color channels as stored") {
    Bytes rgba;
    for (std::size_t i = 0; i < p.rgb.size() / 3; ++i)
      rgba.insert(rgba.end(), {p.rgb[3 * i], p.rgb[3 * i + 1], p.rgb[3 * i + 2], static_cast<std::uint8_t>(1 + i % 250)});
    std::uint8_t* out = nullptr;
    const std::size_t n = WebPEncodeLosslessRGBA(rgba.data(), 17, 9, 17 * 4, &out);
    REQUIRE(n > 0);
    CHECK(decode_image(Bytes(out, out + n), "x").rgb == p.rgb);
    WebPFree(out);
  }
  SUBCASE("EXIF chunk") {
    const Image q = pattern(5, 3);
    for (int o = 1; o <= 8; ++o) {
      CAPTURE(o);
      const Image turned = decode_image(webp_extended(webp_lossless(q), 5, 3, exif_with_orientation(o)), "x");
      PngSpec s{.width = 5, .height = 3, .samples = q.rgb, .exif = exif_with_orientation(o)};
      CHECK(turned.rgb == decode_image(encode_png(s), "x").rgb);
    }
  }
}

TEST_CASE("image decode: GIF's first frame placed and colored as Pillow's frame 0") {
  const std::vector<GifColorType> palette = {{10, 20, 30}, {200, 100, 50}, {1, 2, 3}, {250, 251, 252}};
  SUBCASE("the frame covers the screen: each index its palette color") {
    const Image im = decode_image(encode_gif({.screen_w = 4, .screen_h = 1, .global = palette, .width = 4, .height = 1,
                                              .indices = {3, 2, 1, 0}}), "x");
    CHECK(im.rgb == Bytes{250, 251, 252, 1, 2, 3, 200, 100, 50, 10, 20, 30});
  }
  SUBCASE("a smaller frame: outside it the transparent index's color, else index 0's") {
    GifSpec s{.screen_w = 4, .screen_h = 3, .global = palette, .left = 1, .top = 1, .width = 2, .height = 1, .indices = {1, 1}};
    Image im = decode_image(encode_gif(s), "x");
    CHECK(px(im, 0, 0) == 0x0A141E);
    CHECK(px(im, 1, 1) == 0xC86432);
    CHECK(px(im, 3, 2) == 0x0A141E);
    s.transparent = 2;
    im = decode_image(encode_gif(s), "x");
    CHECK(px(im, 0, 0) == 0x010203);
    CHECK(px(im, 2, 1) == 0xC86432);
  }
  SUBCASE("a frame past the screen grows the canvas; a local palette wins") {
    const std::vector<GifColorType> local = {{9, 9, 9}, {7, 7, 70}};
    const Image im = decode_image(encode_gif({.screen_w = 2, .screen_h = 2, .global = palette, .local = local, .left = 1,
                                              .top = 1, .width = 3, .height = 2, .indices = {1, 1, 1, 0, 0, 1}}), "x");
    CHECK(im.width == 4);
    CHECK(im.height == 3);
    CHECK(px(im, 0, 0) == 0x090909);  // index 0 of the frame's palette
    CHECK(px(im, 3, 2) == 0x070746);
  }
  SUBCASE("an identity gray palette or none: each index its own gray level (mode L)") {
    std::vector<GifColorType> ramp;
    for (int i = 0; i < 4; ++i) ramp.push_back({static_cast<GifByteType>(i), static_cast<GifByteType>(i), static_cast<GifByteType>(i)});
    const Image im = decode_image(encode_gif({.screen_w = 2, .screen_h = 1, .global = ramp, .width = 2, .height = 1, .indices = {3, 1}}), "x");
    CHECK(im.rgb == Bytes{3, 3, 3, 1, 1, 1});
  }
  SUBCASE("interlaced rows back in place") {
    Bytes column;
    for (int y = 0; y < 11; ++y) column.push_back(static_cast<std::uint8_t>(y % 4));
    const Image im = decode_image(encode_gif({.screen_w = 1, .screen_h = 11, .global = palette, .width = 1, .height = 11,
                                              .indices = column, .interlace = true}), "x");
    for (int y = 0; y < 11; ++y) CHECK(px(im, 0, y) == (std::uint32_t{palette[y % 4].Red} << 16 | palette[y % 4].Green << 8 | palette[y % 4].Blue));
  }
}

TEST_CASE("image decode: hostile JPEG, WebP and GIF input is a named request error") {
  const Image p = pattern(12, 10);
  const Bytes jpeg = encode_jpeg({.width = 12, .height = 10, .samples = p.rgb, .quality = 75});
  const Bytes webp = webp_lossless(p);
  Bytes indices(120);
  for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<std::uint8_t>(i % 4);
  const Bytes gif = encode_gif({.screen_w = 12, .screen_h = 10, .global = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {0, 0, 0}},
                                .width = 12, .height = 10, .indices = indices});
  for (const Bytes* file : {&jpeg, &webp, &gif}) {
    REQUIRE(decode_image(*file, "x").width == 12);
    for (std::size_t n = 1; n < file->size(); ++n) decodes_or_errors(Bytes(file->begin(), file->begin() + n));
    for (std::size_t i = 0; i < file->size(); ++i) {
      Bytes b = *file;
      b[i] ^= 0xA5;
      decodes_or_errors(b);
    }
    const std::string half = error_of(Bytes(file->begin(), file->begin() + file->size() / 2));
    CHECK(half.find("truncated") != std::string::npos);
  }
  SUBCASE("declared dimensions over the limits") {
    Bytes big = jpeg;  // SOF0: FF C0, length, precision, height, width
    std::size_t sof = 2;
    while (!(big[sof] == 0xFF && big[sof + 1] == 0xC0)) ++sof;
    big[sof + 5] = 0xEA, big[sof + 6] = 0x60, big[sof + 7] = 0xEA, big[sof + 8] = 0x60;  // 60000 x 60000
    CHECK(error_of(big).find("60000x60000") != std::string::npos);
    Bytes huge_webp = webp;  // the VP8L header's 14-bit width-1 and height-1: 16384 x 16384
    REQUIRE(huge_webp[20] == 0x2f);
    huge_webp[21] = huge_webp[22] = huge_webp[23] = 0xFF, huge_webp[24] = 0x0F;
    CHECK(error_of(huge_webp).find("16384x16384") != std::string::npos);
    CHECK(error_of(webp_extended(huge_webp, 16384, 16384, {})).find("16384x16384") != std::string::npos);
    Bytes wide = gif;  // the logical screen: 65535 x 65535
    wide[6] = wide[7] = wide[8] = wide[9] = 0xFF;
    CHECK(error_of(wide).find("65535x65535") != std::string::npos);
    CHECK(error_of(gif, {.max_pixels = 100}).find("12x10 = 120 pixels, over the limit of 100") != std::string::npos);
    CHECK(error_of(jpeg, {.max_side = 11}).find("12x10 pixels, over the limit of 11") != std::string::npos);
  }
  SUBCASE("a GIF without an image") {
    CHECK(error_of({'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0, 0, 0, ';'}).find("no image") != std::string::npos);
  }
}
