// stoker-pack's ImagePreparer: what is stored of a file, and the memory a thread keeps for it.
#include "tools/pack/pack_image.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "stoker/error.h"
#include "stoker/options.h"
#include "tests/support/test_images.h"

namespace stoker::test {
namespace {

std::vector<std::byte> png_of(int h, int w) {
  return encode_png(std::vector<std::uint8_t>(static_cast<std::size_t>(h) * w * 3, 0x5a), h, w);
}

// --verify=decode decodes every image whole and keeps no pixel: the buffer an outlier needed (a
// 4096 x 2048 image, 24 MiB of pixels) is given back by the next, small file, not kept for the
// rest of the pack.
TEST(ImagePreparer, DecodingToVerifyGivesAnOutliersMemoryBack) {
  tools::ImagePreparer prepare({0, 90, kDefaultMaxImagePixels, true});
  const std::vector<std::byte> large = png_of(2048, 4096), small = png_of(16, 16);
  EXPECT_EQ(prepare.prepare(large).data(), large.data()) << "stored as it is";
  EXPECT_GE(prepare.buffer_bytes(), std::size_t{4096} * 2048 * 3);
  EXPECT_EQ(prepare.prepare(small).data(), small.data());
  EXPECT_LT(prepare.buffer_bytes(), std::size_t{1} << 20);
  // Files of a similar size reuse what they have.
  EXPECT_EQ(prepare.prepare(large).data(), large.data());
  const std::size_t held = prepare.buffer_bytes();
  EXPECT_FALSE(prepare.prepare(png_of(2000, 4000)).empty());
  EXPECT_EQ(prepare.buffer_bytes(), held);
}

// The same with --max-side, which decodes (at the smallest DCT scale for a JPEG) and resizes.
TEST(ImagePreparer, ResizingGivesAnOutliersMemoryBack) {
  tools::ImagePreparer prepare({64, 90, kDefaultMaxImagePixels, false});
  (void)prepare.prepare(png_of(2048, 4096));
  EXPECT_TRUE(prepare.reencoded());
  EXPECT_GE(prepare.buffer_bytes(), std::size_t{4096} * 2048 * 3);
  (void)prepare.prepare(png_of(100, 80));
  EXPECT_TRUE(prepare.reencoded());
  EXPECT_LT(prepare.buffer_bytes(), std::size_t{1} << 20);
}

}  // namespace
}  // namespace stoker::test
