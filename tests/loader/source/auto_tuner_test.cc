#include "loader/source/auto_tuner.h"

#include <gtest/gtest.h>

namespace stoker::detail {
namespace {

// The workers' time filling an interval's batches: busy all of it, or idle (waiting for a slot).
constexpr double kBusy = 1e6;
constexpr double kIdle = 0;

AutoTuner::Limits limits(std::uint32_t workers, std::uint32_t depth) {
  AutoTuner::Limits l;
  l.max_workers = workers;
  l.max_depth = depth;
  return l;
}

TEST(AutoTuner, AddsWorkersWhileTheyHelpThenSettles) {
  AutoTuner t(limits(4, 16));
  EXPECT_EQ(t.workers(), 1u);
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_FALSE(t.observe(100, 1.0, 0.5, kBusy));  // every decision takes two intervals
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, kBusy));   // waiting half the time: one more worker
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.observe(90, 1.0, 0.5, kBusy));   // the new worker's warm-up is not judged
  EXPECT_FALSE(t.observe(120, 1.0, 0.2, kBusy));  // an interval across an epoch's end reads low...
  EXPECT_TRUE(t.observe(180, 1.0, 0.2, kBusy));   // ...the better one counts: 80% faster, still waiting: a third
  EXPECT_EQ(t.workers(), 3u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, kBusy));  // warm-up
  EXPECT_FALSE(t.observe(150, 1.0, 0.2, kBusy));
  EXPECT_TRUE(t.observe(170, 1.0, 0.2, kBusy));  // slower than 180: back to 2, settled
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_TRUE(t.settled());
  EXPECT_FALSE(t.observe(10, 1.0, 0.9, kBusy));  // settled stays settled
  EXPECT_EQ(t.describe(), "2 workers, prefetch 2 (auto: settled)");
}

// A step that gains less than 5% is kept, not taken back, and the tuner stops there: on a shared
// machine such a gain cannot be told from the intervals' noise, and a real one is worth keeping.
TEST(AutoTuner, ASmallGainIsKeptAndEndsTheTuning) {
  AutoTuner t(limits(4, 16));
  t.observe(100, 1.0, 0.5, kBusy);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, kBusy));
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, kBusy));  // warm-up
  EXPECT_FALSE(t.observe(95, 1.0, 0.5, kBusy));
  EXPECT_FALSE(t.observe(103, 1.0, 0.5, kBusy));  // 3% faster: kept, settled
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.describe(), "2 workers, prefetch 2 (auto: settled)");
}

// A worker added to a memory-mapped dataset runs its first pass well below its pace (it opens the
// dataset and fills its page tables): that interval is not held against it.
TEST(AutoTuner, ANewWorkersWarmUpIsNotHeldAgainstIt) {
  AutoTuner t(limits(2, 8));
  t.observe(100, 1.0, 0.5, kBusy);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, kBusy));
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.8, kBusy));   // warm-up: slower than 1 worker was
  EXPECT_FALSE(t.observe(100, 1.0, 0.5, kBusy));  // warm
  EXPECT_TRUE(t.observe(170, 1.0, 0.3, kIdle));   // 70% faster: kept; they idle: the ring deepens
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_EQ(t.prefetch(), 3u);
  EXPECT_FALSE(t.settled());
}

TEST(AutoTuner, AConsumerThatDoesNotWaitNeedsNothingMore) {
  AutoTuner t(limits(4, 16));
  EXPECT_FALSE(t.observe(100, 1.0, 0.01, kBusy));
  EXPECT_FALSE(t.observe(100, 1.0, 0.0, kBusy));
  EXPECT_EQ(t.workers(), 1u);
  EXPECT_FALSE(t.settled());  // it would still grow if the loop started waiting
}

TEST(AutoTuner, DeepensTheRingWhenWorkersRunOut) {
  AutoTuner t(limits(2, 6));
  t.observe(100, 1.0, 0.5, kBusy);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, kBusy));
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.observe(10, 1.0, 0.9, kBusy));  // warm-up
  t.observe(150, 1.0, 0.5, kIdle);
  EXPECT_TRUE(t.observe(150, 1.0, 0.5, kIdle));  // they wait for slots: the ring now 2 workers x 3
  EXPECT_EQ(t.prefetch(), 3u);
  EXPECT_EQ(t.depth(), 6u);
  t.observe(200, 1.0, 0.5, kIdle);
  EXPECT_FALSE(t.observe(200, 1.0, 0.5, kIdle));  // helped; nothing more fits the ring of 6
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.depth(), 6u);
}

TEST(AutoTuner, AFixedWorkerCountTunesOnlyPrefetch) {
  AutoTuner::Limits l = limits(3, 12);
  l.tune_workers = false;
  l.start_workers = 3;
  AutoTuner t(l);
  EXPECT_EQ(t.workers(), 3u);
  t.observe(100, 1.0, 0.5, kIdle);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, kIdle));
  EXPECT_EQ(t.workers(), 3u);
  EXPECT_EQ(t.prefetch(), 3u);
}

// Workers busy at their most are the limit, and a deeper ring does not make them faster (on large
// samples it makes them slower: its slots stop sharing the caches): the tuner settles.
TEST(AutoTuner, BusyWorkersAtTheirMostSettleWithoutDeepeningTheRing) {
  AutoTuner t(limits(2, 8));
  t.observe(100, 1.0, 0.5, 1.0);  // one worker, busy the whole second
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, 0.95));
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, 1.2));  // warm-up
  t.observe(170, 1.0, 0.3, 1.9);
  EXPECT_FALSE(t.observe(175, 1.0, 0.3, 1.9));  // 75% faster, both busy 95%: no third worker to add
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_EQ(t.prefetch(), 2u);
}

// Workers that idle while the loop waits are short of slots, not of company: the ring deepens and
// no worker is added.
TEST(AutoTuner, IdleWorkersDeepenTheRingRatherThanAddWorkers) {
  AutoTuner t(limits(4, 16));
  t.observe(100, 1.0, 0.5, 0.5);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, 0.5));  // busy half the time
  EXPECT_EQ(t.workers(), 1u);
  EXPECT_EQ(t.prefetch(), 3u);
}

}  // namespace
}  // namespace stoker::detail
