#include "loader/plan/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "loader/plan/shuffle.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

// docs/sampler.md, implemented again without 128-bit integers: the high 64 bits of r * m from
// 32-bit halves.
std::uint64_t mul_hi(std::uint64_t a, std::uint64_t b) {
  std::uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32, b_lo = b & 0xffffffffu, b_hi = b >> 32;
  std::uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  std::uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}

std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<std::uint64_t> reference_permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::uint64_t> p;
  for (std::uint64_t i = 0; i < n; ++i) p.push_back(i);
  std::uint64_t state = mix(mix(seed) ^ epoch);
  for (std::uint64_t i = n - 1; i >= 1 && n > 0; --i) {
    state += 0x9e3779b97f4a7c15ULL;
    std::uint64_t j = mul_hi(mix(state), i + 1);
    std::swap(p[i], p[j]);
  }
  return p;
}

TEST(Sampler, PermutationMatchesTheDocumentedAlgorithm) {
  for (std::uint64_t n : {1u, 2u, 10u, 1000u}) {
    for (std::uint64_t seed : {0u, 1u, 42u}) {
      for (std::uint64_t epoch : {0u, 1u, 7u}) {
        EXPECT_EQ(permutation(n, seed, epoch), reference_permutation(n, seed, epoch))
            << n << " " << seed << " " << epoch;
      }
    }
  }
}

TEST(Sampler, PermutationKnownAnswer) {
  // Also printed in docs/sampler.md, and reproduced there by a Python snippet.
  std::vector<std::uint64_t> expected{0, 3, 5, 7, 9, 8, 2, 1, 4, 6};
  EXPECT_EQ(permutation(10, 42, 0), expected);
}

TEST(Sampler, SeedAndEpochDoNotAlias) {
  EXPECT_NE(epoch_stream(1, 0), epoch_stream(0, 1));
  EXPECT_NE(permutation(100, 1, 0), permutation(100, 0, 1));
  EXPECT_NE(permutation(100, 0, 0), permutation(100, 0, 1));
}

TEST(Sampler, EveryIndexExactlyOncePerEpoch) {
  for (bool shuffle : {false, true}) {
    for (bool drop_last : {false, true}) {
      Sampler s(103, 10, shuffle ? Order::random : Order::sequential, 5, {}, drop_last);
      auto order = s.epoch_order(3);
      EXPECT_EQ(order.size(), drop_last ? 100u : 103u);
      EXPECT_EQ(s.batches_per_epoch(), drop_last ? 10u : 11u);
      std::set<std::uint64_t> seen(order.begin(), order.end());
      EXPECT_EQ(seen.size(), order.size());
      EXPECT_LT(*seen.rbegin(), 103u);
      if (!shuffle) {
        std::vector<std::uint64_t> seq(order.size());
        std::iota(seq.begin(), seq.end(), 0);
        EXPECT_EQ(order, seq);
      }
    }
  }
}

TEST(Sampler, ThreeRanksCoverEverySampleWithWrappedPadding) {
  const std::uint64_t n = 100;
  std::map<std::uint64_t, int> count;
  std::vector<std::vector<std::uint64_t>> per_rank;
  for (std::uint32_t r = 0; r < 3; ++r) {
    Sampler s(n, 8, Order::random, 9, Shard{r, 3}, false);
    per_rank.push_back(s.epoch_order(2));
    EXPECT_EQ(per_rank.back().size(), 34u);  // ceil(100 / 3)
    for (auto i : per_rank.back()) ++count[i];
  }
  EXPECT_EQ(count.size(), n);
  // 102 slots for 100 samples: the first two of the permutation are delivered twice.
  auto perm = permutation(n, 9, 2);
  for (auto [i, c] : count) EXPECT_EQ(c, (i == perm[0] || i == perm[1]) ? 2 : 1) << i;
  // DistributedSampler's interleave: rank r takes positions r, r + 3, ...
  EXPECT_EQ(per_rank[1][0], perm[1]);
  EXPECT_EQ(per_rank[2][1], perm[5]);
}

TEST(Sampler, ShardWithDropLastIsDisjoint) {
  std::set<std::uint64_t> seen;
  for (std::uint32_t r = 0; r < 3; ++r) {
    Sampler s(100, 1, Order::random, 9, Shard{r, 3}, true);
    auto order = s.epoch_order(0);
    EXPECT_EQ(order.size(), 33u);
    for (auto i : order) EXPECT_TRUE(seen.insert(i).second) << i;
  }
  EXPECT_EQ(seen.size(), 99u);
}

TEST(Sampler, MoreRanksThanSamplesWrapsRepeatedly) {
  Sampler s(2, 1, Order::sequential, 0, Shard{4, 5}, false);
  EXPECT_EQ(s.epoch_order(0), (std::vector<std::uint64_t>{0}));
}

TEST(Sampler, RejectsBadArguments) {
  EXPECT_THROW(Sampler(10, 0, Order::sequential, 0, {}, false), Error);
  EXPECT_THROW(Sampler(10, 1, Order::sequential, 0, Shard{3, 3}, false), Error);
  EXPECT_THROW(Sampler(10, 1, Order::sequential, 0, Shard{0, 0}, false), Error);
}

}  // namespace
}  // namespace stoker::detail
