// Encoding 8-bit RGB pixels as a JPEG (libjpeg-turbo), for re-encoding images at write time
// (stoker-pack --max-side): baseline, 4:2:0 chroma, the standard quantisation tables scaled to
// `quality` (1..100, libjpeg's and PIL's meaning), optimised Huffman tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "stoker/export.h"

namespace stoker::formats {

// Replaces `out` with the JPEG of `rgb` (height x width x 3, rows contiguous). Throws stoker::Error
// with libjpeg's reason for a size it cannot encode (0, or past 65 500 pixels a side).
STOKER_TOOLS_API void encode_jpeg(const std::uint8_t* rgb, int height, int width, int quality,
                                  std::vector<std::byte>& out);

}  // namespace stoker::formats
