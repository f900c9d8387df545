// Decoding JPEG (libjpeg-turbo) and PNG (libspng) samples into 8-bit RGB, HWC.
//
// JPEG decoding reads only what a region needs: the rows above it are skipped
// (jpeg_skip_scanlines), the columns outside its iMCUs are not decoded (jpeg_crop_scanline), and
// when the region will be shrunk anyway the DCT scales it down by n/8 on the way. A full-image,
// unscaled decode is libjpeg-turbo's default decode (accurate integer IDCT, fancy upsampling):
// byte for byte what PIL and torchvision produce; a CMYK or YCCK JPEG becomes the RGB of PIL's
// convert("RGB") (Adobe's inverted CMYK through PIL's formula, docs/pipeline.md). A progressive
// JPEG holds every coefficient of the whole image until its last scan (about 2 bytes per pixel and
// colour component), whatever the region: there the region saves decoding time, not memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stoker/export.h"

namespace stoker::formats {

struct ImageInfo {
  enum class Kind { jpeg, png } kind = Kind::jpeg;
  int width = 0;
  int height = 0;
};

// The format and size from the header; throws stoker::Error for bytes that are not a JPEG or PNG
// image, whose header is corrupt, or that claim more than `max_pixels` pixels (Options::
// max_image_pixels): a decompression bomb is refused before any pixel is decoded, as PIL refuses
// what exceeds its MAX_IMAGE_PIXELS.
STOKER_TOOLS_API ImageInfo image_info(std::span<const std::byte> data, std::uint64_t max_pixels);

// A rectangle of an image, in its pixels.
struct Region {
  int x = 0, y = 0, width = 0, height = 0;
};

// How a region of an image is decoded: at scale_num/8 of its size (a JPEG whose region will be
// shrunk anyway to at least `min_width` x `min_height`, the size the caller resizes it to; 0: no
// scaling), giving width x height pixels (the region's, or fewer).
struct DecodePlan {
  int scale_num = 8;
  int width = 0, height = 0;
};
STOKER_TOOLS_API DecodePlan plan_decode(const ImageInfo& info, const Region& region, int min_width, int min_height);

// Decodes `region` of the image as `plan` says into `out` (plan.height x plan.width x 3 bytes, u8
// RGB). `scratch` holds a row (an interlaced PNG: the whole image). Throws stoker::Error with
// libjpeg's or libspng's reason for a corrupt or truncated image, a JPEG of a colour space without
// an RGB conversion (2 components), a JPEG whose warnings mean corruption (an inconsistent
// progression, bad Huffman codes, missing data), or a progressive JPEG of more than kMaxJpegScans
// scans (each scan re-reads the whole image: a small file of thousands costs a minute of CPU).
inline constexpr int kMaxJpegScans = 500;  // as TurboJPEG's scan limit
STOKER_TOOLS_API void decode_region(std::span<const std::byte> data, const ImageInfo& info, const Region& region,
                                    const DecodePlan& plan, std::byte* out, std::vector<std::byte>& scratch);

}  // namespace stoker::formats
