// libFuzzer target: any byte string given to decode_image (PNG, JPEG, WebP, GIF by signature)
// either throws kylin::Error (a request error) or yields an image whose size is what it says and
// within the limits. Anything else (a crash, a hang, a leak, a sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "kylin/io/image_decode.hpp"

namespace {

void require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Smaller limits than the default: a run's memory stays low and each input fast.
  const kylin::io::ImageLimits limits{.max_pixels = 1 << 22, .max_side = 8192, .max_bytes = 1 << 20};
  try {
    const kylin::vision::Image im = kylin::io::decode_image(std::span(data, size), "fuzz.image", limits);
    require(im.width > 0 && im.height > 0 && im.width <= limits.max_side && im.height <= limits.max_side);
    require(im.width * im.height <= limits.max_pixels);
    require(im.rgb.size() == static_cast<std::size_t>(im.width * im.height * 3));
    volatile std::uint8_t sink = im.rgb.front() ^ im.rgb.back();  // ASan: the buffer is all there
    (void)sink;
  } catch (const kylin::Error& e) {
    require(e.category() == kylin::ErrorCategory::request);
  }
  return 0;
}
