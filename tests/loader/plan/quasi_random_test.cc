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

TEST(QuasiRandom, OneShardIsTheOrderOfOneFile) {
  for (std::uint64_t n : {1u, 7u, 1000u, 1025u}) {
    const std::uint64_t one[] = {n};
    EXPECT_EQ(quasi_random_order(n, 16, 4, 9, 2, one), quasi_random_order(n, 16, 4, 9, 2)) << n;
  }
}

// A shard set: groups start at each shard, and shards are read kQuasiRandomInterleavedShards at a
// time: each block of positions holds exactly the samples of its shards, every shard in one block.
TEST(QuasiRandom, AShardSetIsReadAFewShardsAtATimeEverySampleOnce) {
  const std::vector<std::uint64_t> shards = {70, 33, 100, 5, 64, 1, 9, 90, 17, 300, 12, 40, 41, 42, 43, 44, 45, 46, 7};
  std::vector<std::uint64_t> first(shards.size(), 0);
  for (std::size_t s = 1; s < shards.size(); ++s) first[s] = first[s - 1] + shards[s - 1];
  const std::uint64_t n = first.back() + shards.back(), g = 32;
  auto shard_of = [&](std::uint64_t i) {
    return static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), i) - first.begin() - 1);
  };
  for (std::uint64_t epoch : {0u, 3u}) {
    const auto order = quasi_random_order(n, g, 4, 11, epoch, shards);
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::uint64_t> all(n);
    std::iota(all.begin(), all.end(), 0);
    ASSERT_EQ(sorted, all) << "every sample once, epoch " << epoch;

    std::set<std::size_t> seen;
    std::uint64_t pos = 0;
    for (std::size_t block = 0; pos < n; ++block) {
      // The block's shards are those of its first position's shard's block; collect until 8 shards
      // (or the end) are complete.
      std::set<std::size_t> members;
      std::uint64_t samples = 0, begin = pos;
      while (pos < n) {
        const std::size_t s = shard_of(order[pos]);
        if (!members.contains(s)) {
          if (members.size() == kQuasiRandomInterleavedShards) break;
          EXPECT_FALSE(seen.contains(s)) << "shard " << s << " in two blocks, epoch " << epoch;
          members.insert(s);
          samples += shards[s];
        }
        ++pos;
      }
      EXPECT_EQ(pos - begin, samples) << "block " << block << " holds exactly its shards' samples";
      seen.insert(members.begin(), members.end());
      // Mixed: the block's first 64 positions are not one group in sequence.
      std::set<std::uint64_t> groups;
      for (std::uint64_t p = begin; p < std::min(begin + 64, pos); ++p) {
        const std::size_t s = shard_of(order[p]);
        groups.insert(first[s] * 1000 + (order[p] - first[s]) / g);
      }
      EXPECT_GE(groups.size(), 3u) << "block " << block;
    }
    EXPECT_EQ(seen.size(), shards.size()) << "every shard is read";
  }
  // docs/sampler.md's Python (bench/stoker_order.py: quasi_random_shards) gives the same order.
  const std::vector<std::uint64_t> python = {596, 382, 405, 393, 574, 400, 606, 399, 575, 615};
  const std::vector<std::uint64_t> few = {70, 33, 100, 5, 64, 1, 0, 90, 17, 300, 12};
  const auto order = quasi_random_order(692, 32, 4, 11, 3, few);
  EXPECT_EQ(std::vector<std::uint64_t>(order.begin(), order.begin() + 10), python);
}

// Groups of a shard set never straddle two shards: a window's samples come from whole groups of
// single shards, so in a shard set of shards shorter than a group, each shard's samples lie in one
// window, consecutive in the epoch.
TEST(QuasiRandom, AShardSetsGroupsStartAtEachShard) {
  const std::vector<std::uint64_t> shards = {5, 7, 3, 6, 2, 8, 4, 5};  // one block, each shard one short group
  const std::uint64_t n = 40, g = 16;
  std::vector<std::uint64_t> first(shards.size(), 0);
  for (std::size_t s = 1; s < shards.size(); ++s) first[s] = first[s - 1] + shards[s - 1];
  const auto order = quasi_random_order(n, g, 2, 5, 1, shards);
  // Windows of 2 groups = 2 shards: walking the positions, each pair of shards is finished before
  // another shard starts.
  std::set<std::size_t> open;
  std::vector<std::uint64_t> left = shards;
  for (std::uint64_t p = 0; p < n; ++p) {
    const std::size_t s =
        static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), order[p]) - first.begin() - 1);
    open.insert(s);
    EXPECT_LE(open.size(), 2u) << "position " << p;
    if (--left[s] == 0) open.erase(s);
  }
}

}  // namespace
}  // namespace stoker::detail
