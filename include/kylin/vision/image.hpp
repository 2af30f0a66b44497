// An image as the vision pipeline sees it after decoding: 8-bit RGB, rows top to bottom, the
// orientation applied (what PIL's exif_transpose + convert("RGB") hands the HF processor).
#pragma once

#include <cstdint>
#include <vector>

namespace kylin::vision {

struct Image {
  std::int64_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;  // [height][width][3]

  std::uint8_t at(std::int64_t y, std::int64_t x, int c) const { return rgb[static_cast<std::size_t>((y * width + x) * 3 + c)]; }
};

}  // namespace kylin::vision
