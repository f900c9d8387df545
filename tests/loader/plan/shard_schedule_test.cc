#include "loader/plan/shard_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "loader/plan/sampler.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

BatchShards reads_of(const std::vector<std::vector<std::uint32_t>>& batches, std::uint64_t first = 0) {
  BatchShards r;
  r.first = first;
  r.begin.push_back(0);
  for (auto b : batches) {
    std::sort(b.begin(), b.end());
    r.shards.insert(r.shards.end(), b.begin(), b.end());
    r.begin.push_back(r.shards.size());
  }
  return r;
}

// The fewest fetches any schedule can make (prefetching what it likes, when it likes), found by
// trying every cache content after every batch: the optimum Belady's policy must reach.
std::uint64_t optimal_fetches(const std::vector<std::vector<std::uint32_t>>& batches, std::uint32_t shards,
                              std::size_t capacity, std::uint32_t initial) {
  constexpr std::uint64_t kInf = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::uint64_t> best(1u << shards, kInf);
  best[initial] = 0;
  for (const auto& batch : batches) {
    std::uint32_t need = 0;
    for (std::uint32_t s : batch) need |= 1u << s;
    std::vector<std::uint64_t> next(best.size(), kInf);
    for (std::uint32_t from = 0; from < best.size(); ++from) {
      if (best[from] == kInf) continue;
      for (std::uint32_t to = 0; to < best.size(); ++to) {
        if ((to & need) != need || static_cast<std::size_t>(std::popcount(to)) > capacity) continue;
        next[to] = std::min(next[to], best[from] + static_cast<std::uint64_t>(std::popcount(to & ~from)));
      }
    }
    best = std::move(next);
  }
  return *std::min_element(best.begin(), best.end());
}

// Runs `schedule` as a loader does and checks it: a step's eviction is of a cached shard no batch
// in [evict_after, its batch) reads, its batches before evict_after already read; every batch's
// shards are cached when it is read; the cache never holds more than `capacity`.
void check_runs(const BatchShards& reads, const ShardSchedule& schedule, std::size_t capacity,
                std::vector<std::uint32_t> cached) {
  std::set<std::uint32_t> cache(cached.begin(), cached.end());
  std::size_t done = 0;
  for (std::uint64_t b = reads.first; b < reads.end(); ++b) {
    for (; done < schedule.steps_before[b - reads.first]; ++done) {
      const FetchStep& step = schedule.steps[done];
      EXPECT_EQ(step.batch, b);
      if (step.evict) {
        ASSERT_TRUE(cache.erase(*step.evict)) << "step " << done;
        EXPECT_LE(step.evict_after, b);
        for (std::uint64_t later = step.evict_after; later < b; ++later) {
          auto of = reads.of(later);
          EXPECT_EQ(std::count(of.begin(), of.end(), *step.evict), 0) << "step " << done << ", batch " << later;
        }
        if (step.evict_after > reads.first) {
          auto of = reads.of(step.evict_after - 1);
          EXPECT_EQ(std::count(of.begin(), of.end(), *step.evict), 1)
              << "its last read, batch " << step.evict_after - 1;
        }
      }
      EXPECT_TRUE(cache.insert(step.shard).second) << "step " << done << " fetched a cached shard";
      EXPECT_LE(cache.size(), capacity);
    }
    for (std::uint32_t s : reads.of(b)) EXPECT_TRUE(cache.contains(s)) << "batch " << b << ", shard " << s;
  }
  EXPECT_EQ(done, schedule.steps.size());
  EXPECT_EQ(std::vector<std::uint32_t>(cache.begin(), cache.end()), schedule.cached_at_end);
}

TEST(ShardSchedule, BeladyFetchesAsFewAsTheBestScheduleOnRandomOrders) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const std::uint32_t shards = 2 + static_cast<std::uint32_t>(rng() % 5);  // 2..6
    const std::size_t capacity = 1 + rng() % shards;
    const std::size_t per_batch = 1 + rng() % capacity;
    std::vector<std::vector<std::uint32_t>> batches(1 + rng() % 12);
    for (auto& b : batches) {
      std::set<std::uint32_t> picked;
      const std::size_t want = 1 + rng() % per_batch;
      while (picked.size() < want) picked.insert(static_cast<std::uint32_t>(rng() % shards));
      b.assign(picked.begin(), picked.end());
    }
    std::vector<std::uint32_t> cached;
    std::uint32_t initial = 0;
    for (std::uint32_t s = 0; s < shards && cached.size() < capacity; ++s) {
      if (rng() % 2) cached.push_back(s), initial |= 1u << s;
    }
    const BatchShards reads = reads_of(batches);
    const ShardSchedule schedule = belady_schedule(reads, capacity, cached);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << shards << " shards, capacity " << capacity);
    EXPECT_EQ(schedule.steps.size(), optimal_fetches(batches, shards, capacity, initial));
    EXPECT_GE(lru_fetches(reads, capacity, cached), schedule.steps.size());
    check_runs(reads, schedule, capacity, cached);
  }
}

TEST(ShardSchedule, ACycleLongerThanTheCacheDefeatsLruButNotBelady) {
  // Shards 0, 1, 2 over and over through a cache of 2: LRU evicts each one just before it is read.
  std::vector<std::vector<std::uint32_t>> batches;
  for (int k = 0; k < 12; ++k) batches.push_back({static_cast<std::uint32_t>(k % 3)});
  const BatchShards reads = reads_of(batches);
  EXPECT_EQ(lru_fetches(reads, 2, {}), 12u);
  const ShardSchedule schedule = belady_schedule(reads, 2, {});
  EXPECT_EQ(schedule.steps.size(), 7u);  // 0 and 1 at first, then one miss in every two reads
  EXPECT_EQ(schedule.steps[2].batch, 2u);
  EXPECT_EQ(schedule.steps[2].shard, 2u);
  EXPECT_EQ(schedule.steps[2].evict, 1u);  // 0 is read at batch 3, 1 only at batch 4
  EXPECT_EQ(schedule.steps[2].evict_after, 2u);
  check_runs(reads, schedule, 2, {});
}

TEST(ShardSchedule, StartsFromTheCachedShardsAndAResumedBatch) {
  // Batches 5..8 of an epoch, shard 3 and 4 already cached: 4 is never read and goes first.
  const BatchShards reads = reads_of({{0, 3}, {3}, {1}, {0}}, 5);
  const ShardSchedule schedule = belady_schedule(reads, 2, {3, 4});
  ASSERT_EQ(schedule.steps.size(), 2u);
  EXPECT_EQ(schedule.steps[0].shard, 0u);
  EXPECT_EQ(schedule.steps[0].evict, 4u);
  EXPECT_EQ(schedule.steps[0].evict_after, 5u);  // read before this epoch's part: nothing to wait for
  EXPECT_EQ(schedule.steps[1].shard, 1u);
  EXPECT_EQ(schedule.steps[1].evict, 3u);  // 0 is read again at batch 8, 3 never
  EXPECT_EQ(schedule.steps[1].evict_after, 7u);
  EXPECT_EQ(schedule.steps_before, (std::vector<std::size_t>{1, 1, 2, 2}));
  EXPECT_EQ(schedule.cached_at_end, (std::vector<std::uint32_t>{0, 1}));
  check_runs(reads, schedule, 2, {3, 4});
}

TEST(ShardSchedule, ABatchThatReadsMoreShardsThanTheCacheHoldsIsRefused) {
  try {
    belady_schedule(reads_of({{0}, {0, 1, 2}}, 10), 2, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_STREQ(e.what(), "batch 11 reads 3 shards, and the cache holds 2 at once");
  }
}

TEST(ShardSchedule, BatchShardsFollowThePlanAndSkipLocalShards) {
  // Shards of 10, 5 and 10 samples, read in order by batches of 4 from batch 1 on; shard 1 is local.
  const Sampler sampler(25, 4, Order::sequential, 0, {}, false, 1, {10, 5, 10});
  const EpochPlan plan = sampler.plan(0);
  const BatchShards reads = batch_shards(plan, 1, {0, 10, 15, 25}, {true, false, true});
  ASSERT_EQ(reads.end(), 7u);
  std::vector<std::vector<std::uint32_t>> got;
  for (std::uint64_t b = 1; b < reads.end(); ++b) got.emplace_back(reads.of(b).begin(), reads.of(b).end());
  // Samples 4-7, 8-11, 12-15, 16-19, 20-23, 24.
  EXPECT_EQ(got, (std::vector<std::vector<std::uint32_t>>{{0}, {0}, {2}, {2}, {2}, {2}}));

  // A random order reads the same samples, each batch's shards sorted once.
  const Sampler shuffled(25, 4, Order::random, 3, {}, false, 1, {10, 5, 10});
  const EpochPlan p = shuffled.plan(2);
  const BatchShards all = batch_shards(p, 0, {0, 10, 15, 25}, {true, true, true});
  for (std::uint64_t b = 0; b < all.end(); ++b) {
    std::set<std::uint32_t> want;
    for (std::uint64_t i : p.batch(b)) want.insert(i < 10 ? 0 : i < 15 ? 1 : 2);
    EXPECT_EQ(std::vector<std::uint32_t>(all.of(b).begin(), all.of(b).end()),
              std::vector<std::uint32_t>(want.begin(), want.end()));
  }
}

}  // namespace
}  // namespace stoker::detail
