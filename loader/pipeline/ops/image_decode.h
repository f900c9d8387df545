// Decoding JPEG (libjpeg-turbo) and PNG (libspng) samples into 8-bit RGB, HWC.
//
// JPEG decoding reads only what a region needs: the rows above it are skipped
// (jpeg_skip_scanlines), the columns outside its iMCUs are not decoded (jpeg_crop_scanline), and
// when the region will be shrunk anyway the DCT scales it down by n/8 on the way. A full-image,
// unscaled decode is libjpeg-turbo's default decode (accurate integer IDCT, fancy upsampling):
// byte for byte what PIL and torchvision produce.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace stoker::detail {

struct ImageInfo {
  enum class Kind { jpeg, png } kind = Kind::jpeg;
  int width = 0;
  int height = 0;
};

// The format and size from the header; throws stoker::Error for bytes that are not a JPEG or PNG
// image, or whose header is corrupt.
ImageInfo image_info(std::span<const std::byte> data);

// A rectangle of an image, in its pixels.
struct Region {
  int x = 0, y = 0, width = 0, height = 0;
};

// Decodes `region` of the image into `out` (u8, region rows x columns x 3) and returns its size,
// which is the region's, or smaller when `min_width` x `min_height` (the size the caller will
// resize it to; 0: no scaling) allows a JPEG to be decoded at n/8 of its size. Throws
// stoker::Error with libjpeg's or libspng's reason for a corrupt or truncated image.
struct Decoded {
  int width = 0, height = 0;
};
Decoded decode_region(std::span<const std::byte> data, const ImageInfo& info, const Region& region, int min_width,
                      int min_height, std::vector<std::byte>& out, std::vector<std::byte>& scratch);

}  // namespace stoker::detail
