#include "tests/support/test_images.h"

#include <gtest/gtest.h>
#include <spng.h>

#include <cstdlib>

namespace stoker::test {

std::vector<std::byte> encode_png(const std::vector<std::uint8_t>& rgb, int h, int w) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<std::uint32_t>(w);
  ihdr.height = static_cast<std::uint32_t>(h);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
  spng_set_ihdr(ctx, &ihdr);
  EXPECT_EQ(0, spng_encode_image(ctx, rgb.data(), rgb.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE));
  std::size_t size = 0;
  int rc = 0;
  void* buf = spng_get_png_buffer(ctx, &size, &rc);
  EXPECT_EQ(0, rc);
  std::vector<std::byte> b(static_cast<std::byte*>(buf), static_cast<std::byte*>(buf) + size);
  std::free(buf);
  spng_ctx_free(ctx);
  return b;
}

}  // namespace stoker::test
