// Interleaved pixels (HWC rows) to planes (CHW): the copy to_chw makes, mirrored when flip asks.
// With SSSE3 (checked at run time) a row of RGB is split sixteen pixels at a time by byte shuffles;
// elsewhere, and for other channel counts, one value at a time. The same bytes either way.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::formats {

// `width` pixels of `channels` u8 values at `hwc` to planes[ch][0 .. width), pixel x at x, or at
// width - 1 - x when `mirrored`. The planes must not overlap `hwc`.
void row_to_planes(const std::uint8_t* hwc, int width, int channels, std::uint8_t* const* planes, bool mirrored);

}  // namespace stoker::formats
