#include "loader/plan/quasi_random.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

namespace stoker::detail {
namespace {

TEST(QuasiRandom, EverySampleOnceAndDeterministic) {
  for (std::uint64_t n : {1u, 7u, 256u, 1000u, 1025u}) {
    for (std::uint64_t g : {1u, 16u, 256u}) {
      auto a = quasi_random_order(n, g, 4, 9, 2);
      auto sorted = a;
      std::sort(sorted.begin(), sorted.end());
      std::vector<std::uint64_t> all(n);
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(sorted, all) << "n " << n << " group " << g;
      EXPECT_EQ(a, quasi_random_order(n, g, 4, 9, 2));
    }
  }
  EXPECT_NE(quasi_random_order(1000, 16, 4, 9, 2), quasi_random_order(1000, 16, 4, 9, 3)) << "epochs differ";
  EXPECT_NE(quasi_random_order(1000, 16, 4, 9, 2), quasi_random_order(1000, 16, 4, 10, 2)) << "seeds differ";
}

TEST(QuasiRandom, EachWindowOfPositionsCoversFewGroupsAndIsMixed) {
  const std::uint64_t n = 4096, g = 64, k = 4;
  auto order = quasi_random_order(n, g, k, 1, 0);
  for (std::uint64_t w = 0; w < n / (g * k); ++w) {
    std::set<std::uint64_t> groups;
    for (std::uint64_t p = w * g * k; p < (w + 1) * g * k; ++p) groups.insert(order[p] / g);
    EXPECT_EQ(groups.size(), k) << "window " << w << " touches exactly its " << k << " groups";
  }
  // Mixed: a batch of 64 from one window spans several groups, not one chunk in sequence.
  std::set<std::uint64_t> first_batch;
  for (std::uint64_t p = 0; p < 64; ++p) first_batch.insert(order[p] / g);
  EXPECT_GE(first_batch.size(), 3u);
  // And not sorted: consecutive positions are rarely consecutive samples.
  std::uint64_t runs = 0;
  for (std::uint64_t p = 1; p < n; ++p) runs += order[p] == order[p - 1] + 1;
  EXPECT_LT(runs, n / 20);
}

}  // namespace
}  // namespace stoker::detail
