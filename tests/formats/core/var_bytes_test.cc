// formats/core: VarBytes, the buffer a bytes field is read into.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "formats/core/reader.h"

namespace stoker::test {
namespace {

// A bytes field read into a slot: straight into the lent buffer while the samples fit; when one
// does not, every sample read so far moves with it into the VarBytes' own memory, unchanged.
TEST(VarBytes, ReadsIntoALentBufferWhileItFitsThenMovesOutWithWhatItHolds) {
  auto fill = [](std::byte* at, std::size_t n, int seed) {
    for (std::size_t i = 0; i < n; ++i) at[i] = static_cast<std::byte>(seed + i);
  };
  std::vector<std::byte> slot(100);
  formats::VarBytes b;
  b.clear_into(slot.data(), slot.size());
  fill(b.append(40), 40, 1);
  fill(b.append(60), 60, 2);
  EXPECT_TRUE(b.writes_into(slot.data()));
  EXPECT_EQ(b.data(), slot.data());
  EXPECT_EQ(b.total(), 100u);
  fill(b.append(30), 30, 3);  // does not fit
  EXPECT_FALSE(b.writes_into(slot.data()));
  ASSERT_EQ(b.samples(), 3u);
  for (int k = 0; k < 3; ++k) {
    const auto got = b.sample(static_cast<std::size_t>(k));
    std::vector<std::byte> want(got.size());
    fill(want.data(), want.size(), k + 1);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << "sample " << k;
  }
  // The next batch: lent again, and its own memory is kept for when it is needed.
  b.clear_into(slot.data(), slot.size());
  fill(b.append(10), 10, 4);
  EXPECT_TRUE(b.writes_into(slot.data()));
  b.clear();
  fill(b.append(1000), 1000, 5);
  EXPECT_FALSE(b.writes_into(slot.data()));
  EXPECT_EQ(b.sample(0)[999], static_cast<std::byte>(5 + 999));
}

}  // namespace
}  // namespace stoker::test
