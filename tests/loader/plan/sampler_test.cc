#include "loader/plan/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "loader/plan/quasi_random.h"
#include "loader/plan/shuffle.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

// docs/sampler.md, implemented again from its text: the domain's bits counted by a loop, the whole
// domain encrypted once, and p read off by walking each cycle.
std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<std::uint64_t> reference_permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) {
  int b = 0;
  while (n > 1 && (std::uint64_t{1} << b) < n) ++b;  // bits of n - 1
  const int h = std::max(4, (b + 1) / 2);
  const std::uint64_t mask = (std::uint64_t{1} << h) - 1;
  std::uint64_t state = mix(mix(seed) ^ epoch), k[6];
  for (auto& key : k) key = mix(state += 0x9e3779b97f4a7c15ULL);
  std::vector<std::uint64_t> encrypted(std::uint64_t{1} << (2 * h));
  for (std::uint64_t x = 0; x < encrypted.size(); ++x) {
    std::uint64_t l = x >> h, r = x & mask;
    for (int round = 0; round < 6; ++round) {
      const std::uint64_t t = l ^ (mix(r ^ k[round]) & mask);
      l = r;
      r = t;
    }
    encrypted[x] = (l << h) | r;
  }
  std::vector<std::uint64_t> p(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t y = encrypted[i];
    while (y >= n) y = encrypted[y];
    p[i] = y;
  }
  return p;
}

TEST(Sampler, PermutationMatchesTheDocumentedAlgorithm) {
  for (std::uint64_t n : {1u, 2u, 10u, 255u, 256u, 257u, 1000u, 70000u}) {
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
  std::vector<std::uint64_t> expected{6, 7, 8, 5, 2, 9, 0, 3, 4, 1};
  EXPECT_EQ(permutation(10, 42, 0), expected);
}

TEST(Sampler, PermutationIsABijectionWithItsInverse) {
  for (std::uint64_t n : {1u, 2u, 3u, 17u, 256u, 1000u, 65537u}) {
    const FeistelPermutation p(n, 5, 1);
    std::vector<bool> seen(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint64_t y = p(i);
      ASSERT_LT(y, n);
      EXPECT_FALSE(seen[y]) << n << ": " << y << " twice";
      seen[y] = true;
      EXPECT_EQ(p.inverse(y), i);
    }
  }
}

// The eight-lane evaluation a batch's indices use gives operator()'s values, for any count (whole
// groups of eight and the rest) and domains where cycle walking takes many steps (n just above a
// power of 4) or none (n a power of 4).
TEST(Sampler, PermutationAppliedToManyPositionsAtOnceEqualsOneByOne) {
  for (std::uint64_t n : {1u, 7u, 257u, 1000u, 65537u, 100000u, 262144u}) {
    const FeistelPermutation p(n, 11, 3);
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{8}, std::size_t{13}, std::size_t{256}}) {
      std::vector<std::uint64_t> v(count), one_by_one(count);
      for (std::size_t k = 0; k < count; ++k) v[k] = (k * 7919 + n / 3) % n;
      for (std::size_t k = 0; k < count; ++k) one_by_one[k] = p(v[k]);
      p.apply(v.data(), v.size());
      EXPECT_EQ(v, one_by_one) << "n " << n << ", count " << count;
    }
  }
  const FeistelPermutation huge(~std::uint64_t{0}, 42, 7);
  std::vector<std::uint64_t> v{0, 1, 2, 3, 4, 5, 6, 7, 8, ~std::uint64_t{0} - 1};
  std::vector<std::uint64_t> one_by_one;
  for (std::uint64_t x : v) one_by_one.push_back(huge(x));
  huge.apply(v.data(), v.size());
  EXPECT_EQ(v, one_by_one);
}

TEST(Sampler, PermutationOfHugeDomainsNeedsNoTable) {
  // 2^32 and 2^63 + 1 samples: positions computed on their own, each in the range, distinct, and
  // inverted exactly, without the gigabytes a table would take.
  for (std::uint64_t n : {std::uint64_t{1} << 32, (std::uint64_t{1} << 63) + 1, ~std::uint64_t{0}}) {
    const FeistelPermutation p(n, 42, 7);
    std::set<std::uint64_t> values;
    for (std::uint64_t i : {std::uint64_t{0}, std::uint64_t{1}, n / 2, n - 2, n - 1}) {
      const std::uint64_t y = p(i);
      EXPECT_LT(y, n);
      EXPECT_EQ(p.inverse(y), i);
      values.insert(y);
    }
    EXPECT_EQ(values.size(), 5u);
  }
}

TEST(Sampler, PermutationIsUniformOverSeeds) {
  // Each position's sample over 4096 fixed seeds, for N = 8: the expected count of each (position,
  // sample) pair is 512; a binomial's standard deviation is about 21, and the bound is 6 of them.
  // The seeds are fixed, so the test is deterministic.
  constexpr std::uint64_t n = 8, seeds = 4096, expected = seeds / n;
  std::uint64_t counts[n][n] = {};
  for (std::uint64_t seed = 0; seed < seeds; ++seed) {
    const FeistelPermutation p(n, seed, 3);
    for (std::uint64_t i = 0; i < n; ++i) ++counts[i][p(i)];
  }
  for (std::uint64_t i = 0; i < n; ++i) {
    for (std::uint64_t v = 0; v < n; ++v) {
      EXPECT_NEAR(static_cast<double>(counts[i][v]), static_cast<double>(expected), 128.0)
          << "position " << i << " sample " << v;
    }
  }
  // The same across epochs of one seed, for an N that is not a power of two.
  constexpr std::uint64_t m = 5, epochs = 5000;
  std::uint64_t by_epoch[m][m] = {};
  for (std::uint64_t e = 0; e < epochs; ++e) {
    const FeistelPermutation p(m, 9, e);
    for (std::uint64_t i = 0; i < m; ++i) ++by_epoch[i][p(i)];
  }
  for (std::uint64_t i = 0; i < m; ++i) {
    for (std::uint64_t v = 0; v < m; ++v) EXPECT_NEAR(static_cast<double>(by_epoch[i][v]), 1000.0, 180.0) << i << v;
  }
}

double correlation(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  for (std::size_t k = 0; k < x.size(); ++k) {
    sx += x[k];
    sy += y[k];
    sxx += x[k] * x[k];
    syy += y[k] * y[k];
    sxy += x[k] * y[k];
  }
  return (n * sxy - sx * sy) / std::sqrt((n * sxx - sx * sx) * (n * syy - sy * sy));
}

TEST(Sampler, PermutationShowsNoCorrelation) {
  // For N = 10 000 and several seeds: consecutive positions' samples, a position and its sample,
  // and the steps between consecutive samples are uncorrelated (|r| < 0.05, where a shuffle gives
  // about 0.01), and consecutive samples are rarely neighbours.
  constexpr std::uint64_t n = 10000;
  for (std::uint64_t seed : {0u, 1u, 2u, 1234u}) {
    const auto p = permutation(n, seed, 0);
    std::vector<double> pos, here, next, step, next_step;
    std::uint64_t neighbours = 0;
    for (std::uint64_t i = 0; i + 2 < n; ++i) {
      pos.push_back(static_cast<double>(i));
      here.push_back(static_cast<double>(p[i]));
      next.push_back(static_cast<double>(p[i + 1]));
      step.push_back(static_cast<double>(p[i + 1]) - static_cast<double>(p[i]));
      next_step.push_back(static_cast<double>(p[i + 2]) - static_cast<double>(p[i + 1]));
      neighbours += p[i + 1] == p[i] + 1 || p[i] == p[i + 1] + 1;
    }
    EXPECT_LT(std::abs(correlation(here, next)), 0.05) << "seed " << seed;
    EXPECT_LT(std::abs(correlation(pos, here)), 0.05) << "seed " << seed;
    EXPECT_LT(std::abs(correlation(step, next_step) + 0.5), 0.05) << "seed " << seed << ": a shuffle gives -0.5";
    EXPECT_LT(neighbours, 10u) << "seed " << seed << ": a shuffle gives about 2";
  }
}

TEST(Sampler, PlanBatchesAreTheEpochOrderCut) {
  for (std::uint32_t world : {1u, 3u}) {
    for (bool drop_last : {false, true}) {
      for (Order order : {Order::sequential, Order::random, Order::quasi_random}) {
        Sampler s(1003, 10, order, 5, Shard{world - 1, world}, drop_last, 16);
        const EpochPlan plan = s.plan(2, 17);
        // DistributedSampler over p[17:], from the whole order: padded by wrapping, interleaved.
        std::vector<std::uint64_t> all(1003);
        std::iota(all.begin(), all.end(), 0);
        if (order == Order::random) all = permutation(1003, 5, 2);
        if (order == Order::quasi_random) all = quasi_random_order(1003, 16, kQuasiRandomWindowGroups, 5, 2);
        all.erase(all.begin(), all.begin() + 17);
        const std::uint64_t left = all.size(), each = drop_last ? left / world : (left + world - 1) / world;
        for (std::uint64_t k = left; k < each * world; ++k) all.push_back(all[k % left]);
        std::vector<std::uint64_t> whole;
        for (std::uint64_t k = world - 1; k < each * world; k += world) whole.push_back(all[k]);
        whole.resize(s.samples_per_epoch(17));
        EXPECT_EQ(s.epoch_order(2, 17), whole);
        std::vector<std::uint64_t> cut;
        for (std::uint64_t b = 0; b < plan.num_batches; ++b) {
          const auto batch = plan.batch(b);
          EXPECT_LE(batch.size(), 10u);
          cut.insert(cut.end(), batch.begin(), batch.end());
        }
        EXPECT_EQ(cut, whole);
        EXPECT_EQ(plan.num_batches, s.batches_per_epoch(17));
      }
    }
  }
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
