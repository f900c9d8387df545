// Encoded test images, for the tests of the image pipeline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::test {

// An 8-bit RGB PNG of h x w pixels (rgb: h * w * 3 bytes, HWC), encoded by libspng.
std::vector<std::byte> encode_png(const std::vector<std::uint8_t>& rgb, int h, int w);

}  // namespace stoker::test
