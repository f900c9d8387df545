#include "loader/producers/auto_tuner.h"

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
  EXPECT_FALSE(t.observe(90, 1.0, 0.5, kBusy));   // its second
  EXPECT_FALSE(t.observe(120, 1.0, 0.2, kBusy));  // an interval across an epoch's end reads low...
  EXPECT_TRUE(t.observe(180, 1.0, 0.2, kBusy));   // ...the better one counts: 80% faster, still waiting: a third
  EXPECT_EQ(t.workers(), 3u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, kBusy));  // warm-up
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, kBusy));  // its second
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
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, kBusy));  // its second
  EXPECT_FALSE(t.observe(95, 1.0, 0.5, kBusy));
  EXPECT_FALSE(t.observe(103, 1.0, 0.5, kBusy));  // 3% faster: kept, settled
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.describe(), "2 workers, prefetch 2 (auto: settled)");
}

// A worker added to a memory-mapped dataset runs its first pass well below its pace (it opens the
// dataset and fills its page tables): those intervals are not held against it.
TEST(AutoTuner, ANewWorkersWarmUpIsNotHeldAgainstIt) {
  AutoTuner t(limits(2, 8));
  t.observe(100, 1.0, 0.5, kBusy);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, kBusy));
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.8, kBusy));   // warm-up: slower than 1 worker was
  EXPECT_FALSE(t.observe(60, 1.0, 0.8, kBusy));   // its second
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
  EXPECT_FALSE(t.observe(10, 1.0, 0.9, kBusy));  // its second
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
  t.observe(100, 1.0, 0.5, 2.4);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, 2.4));  // busy 80%: the ring may fill the rest
  EXPECT_EQ(t.workers(), 3u);
  EXPECT_EQ(t.prefetch(), 3u);
}

// Workers that never idle gain nothing from a deeper ring (on large samples it is slower: its
// slots stop sharing the caches): with no worker left to add, the tuner settles.
TEST(AutoTuner, WorkersThatNeverIdleSettleWithoutDeepeningTheRing) {
  AutoTuner t(limits(2, 8));
  t.observe(100, 1.0, 0.5, 1.0);  // one worker, busy the whole second
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, 0.97));
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, 1.2));  // warm-up
  EXPECT_FALSE(t.observe(90, 1.0, 0.6, 1.6));  // its second
  t.observe(170, 1.0, 0.3, 1.96);
  EXPECT_FALSE(t.observe(175, 1.0, 0.3, 1.96));  // 75% faster, both busy 98%: no third worker to add
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_EQ(t.prefetch(), 2u);
}

// Busy workers that no worker can join may still idle a little: a deeper ring is tried, and taken
// back when it is slower.
TEST(AutoTuner, BusyWorkersThatIdleALittleTryADeeperRingAndKeepItOnlyIfFaster) {
  AutoTuner t(limits(2, 8));
  t.observe(100, 1.0, 0.5, 1.0);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, 0.97));
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, 1.2));  // warm-up
  EXPECT_FALSE(t.observe(90, 1.0, 0.6, 1.6));  // its second
  t.observe(170, 1.0, 0.3, 1.7);
  EXPECT_TRUE(t.observe(175, 1.0, 0.3, 1.7));  // busy 85%: a ring of 2 x 3
  EXPECT_EQ(t.prefetch(), 3u);
  t.observe(150, 1.0, 0.4, 1.7);
  EXPECT_TRUE(t.observe(160, 1.0, 0.4, 1.7));  // slower than 175: back to 2, settled
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_TRUE(t.settled());
}

// A deeper ring must be clearly faster to be kept: within 5%, it is taken back.
TEST(AutoTuner, ADeeperRingWithinTheNoiseIsTakenBack) {
  AutoTuner t(limits(1, 8));
  t.observe(100, 1.0, 0.5, kIdle);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, kIdle));
  EXPECT_EQ(t.prefetch(), 3u);
  t.observe(98, 1.0, 0.5, kIdle);
  EXPECT_TRUE(t.observe(103, 1.0, 0.5, kIdle));  // 3% faster: back to 2, settled
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_TRUE(t.settled());
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
