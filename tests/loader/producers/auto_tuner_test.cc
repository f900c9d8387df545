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

// The first step goes where the stage times point: a worker fills a batch in 10 ms (busy the whole
// second for 100 batches), the loop uses one every 3 ms when it does not wait (0.3 s of 1 s for 100
// batches): 10 / 3 = 3.3, so 4 workers at once. Later steps go one worker at a time, judged.
TEST(AutoTuner, TheFirstStepGoesWhereTheStageTimesPointThenOneAtATime) {
  AutoTuner t(limits(8, 32));
  EXPECT_EQ(t.workers(), 1u);
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_FALSE(t.observe(100, 1.0, 0.7, 1.0));  // every decision takes two intervals
  EXPECT_TRUE(t.observe(100, 1.0, 0.7, 1.0));
  EXPECT_EQ(t.workers(), 4u);
  EXPECT_DOUBLE_EQ(t.min_seconds(), AutoTuner::kMinJudgedSeconds) << "judged on longer intervals";
  EXPECT_FALSE(t.observe(90, 1.0, 0.7, 4.0));   // the new workers' warm-up is not judged
  EXPECT_FALSE(t.observe(90, 1.0, 0.7, 4.0));   // its second
  EXPECT_FALSE(t.observe(250, 1.0, 0.2, 4.0));  // an interval across an epoch's end reads low...
  EXPECT_TRUE(t.observe(330, 1.0, 0.2, 4.0));   // ...the better one counts: faster, still waiting: a fifth
  EXPECT_EQ(t.workers(), 5u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, 5.0));  // warm-up
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, 5.0));  // its second
  EXPECT_FALSE(t.observe(280, 1.0, 0.2, 5.0));
  EXPECT_TRUE(t.observe(300, 1.0, 0.2, 5.0));  // 9% slower than 330: back to 4, settled
  EXPECT_EQ(t.workers(), 4u);
  EXPECT_TRUE(t.settled());
  EXPECT_FALSE(t.observe(10, 1.0, 0.9, kBusy));  // settled stays settled
  EXPECT_EQ(t.describe(), "4 workers, prefetch 2 (auto: settled after 1660 batches)");
}

// A worker that seems a few percent slower is kept: the intervals before it were the shorter,
// noisier ones. It gained nothing clear either, so the tuner settles.
TEST(AutoTuner, MoreWorkersThatSeemAFewPercentSlowerAreKept) {
  AutoTuner t(limits(8, 32));
  t.observe(100, 1.0, 0.7, 1.0);
  EXPECT_TRUE(t.observe(100, 1.0, 0.7, 1.0));
  EXPECT_EQ(t.workers(), 4u);
  t.observe(90, 1.0, 0.7, 4.0);  // warm-up
  t.observe(90, 1.0, 0.7, 4.0);  // its second
  t.observe(90, 1.0, 0.7, 4.0);
  EXPECT_FALSE(t.observe(97, 1.0, 0.7, 4.0));  // 3% slower than 100: within the noise
  EXPECT_EQ(t.workers(), 4u);
  EXPECT_TRUE(t.settled());
  EXPECT_DOUBLE_EQ(t.min_seconds(), AutoTuner::kMinSeconds);
}

// The workers needed are the fewer two intervals say: the first may hold a worker's slow first
// pass (20 ms a batch, then 10).
TEST(AutoTuner, TheJumpGoesAsFarAsTheCalmerOfTwoIntervalsSays) {
  AutoTuner t(limits(16, 64));
  t.observe(100, 1.0, 0.7, 2.0);               // 20 ms to fill, 3 ms to use: 7
  EXPECT_TRUE(t.observe(100, 1.0, 0.7, 1.0));  // 10 ms, 3 ms: 4
  EXPECT_EQ(t.workers(), 4u);
  EXPECT_FALSE(t.settled());
}

// A loop that only waits (it uses a batch in no time) needs every core; a ring too shallow for
// that many cuts the jump short, and the step is then judged.
TEST(AutoTuner, ALoopThatOnlyWaitsGetsEveryCoreTheRingHasRoomFor) {
  AutoTuner every(limits(4, 16));
  every.observe(16, 0.01, 0.01, 0.01);
  EXPECT_TRUE(every.observe(16, 0.01, 0.01, 0.01));
  EXPECT_EQ(every.workers(), 4u);
  EXPECT_TRUE(every.settled());
  AutoTuner shallow(limits(8, 8));  // room for 4 workers of 2 batches
  shallow.observe(16, 0.01, 0.01, 0.01);
  EXPECT_TRUE(shallow.observe(16, 0.01, 0.01, 0.01));
  EXPECT_EQ(shallow.workers(), 4u);
  EXPECT_EQ(shallow.depth(), 8u);
  EXPECT_FALSE(shallow.settled());
}

// Workers that never idle, with more of them needed than there are cores: every core at once, and
// nothing left to try, so the tuner settles then (the skipped first batch counts in the batches it
// settled after). Intervals before the first step hold 8 batches; after it, 16.
TEST(AutoTuner, AJumpToEveryCoreByWorkersThatNeverIdleSettlesAtOnce) {
  AutoTuner t(limits(4, 16));
  t.skip(1);
  EXPECT_EQ(t.min_batches(), 8u);
  EXPECT_FALSE(t.observe(8, 0.01, 0.005, kBusy));
  EXPECT_TRUE(t.observe(8, 0.01, 0.005, kBusy));
  EXPECT_EQ(t.workers(), 4u);
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.describe(), "4 workers, prefetch 2 (auto: settled after 17 batches)");
}

// Every core at once leaves nothing that can be judged soon: the ring goes as deep as half the
// last-level cache holds (Limits::cached_depth slots), at most kAutoMaxPrefetch per worker and never
// shallower than it started.
TEST(AutoTuner, EveryCoreAtOnceTakesTheRingTheCacheHolds) {
  const auto jump = [](std::uint32_t cached_depth, bool tune_prefetch) {
    AutoTuner::Limits l = limits(2, 8);
    l.cached_depth = cached_depth;
    l.tune_prefetch = tune_prefetch;
    AutoTuner t(l);
    t.observe(8, 0.01, 0.005, kBusy);
    EXPECT_TRUE(t.observe(8, 0.01, 0.005, kBusy));
    EXPECT_EQ(t.workers(), 2u);
    EXPECT_TRUE(t.settled());
    return t.prefetch();
  };
  EXPECT_EQ(jump(40, true), 4u) << "small slots: 2 x 4";
  EXPECT_EQ(jump(7, true), 3u);
  EXPECT_EQ(jump(3, true), 2u) << "large slots: as it started";
  EXPECT_EQ(jump(0, true), 2u) << "a cache of unknown size";
  EXPECT_EQ(jump(40, false), 2u) << "a fixed prefetch";
  AutoTuner::Limits shallow = limits(2, 5);  // /dev/shm held a ring of 5
  shallow.cached_depth = 40;
  AutoTuner t(shallow);
  t.observe(8, 0.01, 0.005, kBusy);
  t.observe(8, 0.01, 0.005, kBusy);
  EXPECT_EQ(t.depth(), 4u);
}

// A step that is judged is judged on intervals of 16 batches (and 20 ms), the first step's being
// aimed by two of 8.
TEST(AutoTuner, OnlyTheIntervalsBeforeTheFirstStepAreShort) {
  AutoTuner t(limits(8, 32));
  EXPECT_EQ(t.min_batches(), AutoTuner::kMinFirstBatches);
  t.observe(8, 1.0, 0.7, 1.0);  // 125 ms to fill, 37.5 ms to use: 4 workers
  EXPECT_EQ(t.min_batches(), AutoTuner::kMinFirstBatches);
  EXPECT_TRUE(t.observe(8, 1.0, 0.7, 1.0));
  EXPECT_EQ(t.workers(), 4u);
  EXPECT_EQ(t.min_batches(), AutoTuner::kMinBatches);
  EXPECT_DOUBLE_EQ(t.min_seconds(), AutoTuner::kMinJudgedSeconds);
}

// A jump that made it slower is taken back whole, to where it started.
TEST(AutoTuner, AJumpThatMadeItSlowerIsTakenBackWhole) {
  AutoTuner t(limits(8, 32));
  t.observe(100, 1.0, 0.7, 1.0);
  EXPECT_TRUE(t.observe(100, 1.0, 0.7, 1.0));
  EXPECT_EQ(t.workers(), 4u);
  t.observe(90, 1.0, 0.7, 4.0);  // warm-up
  t.observe(90, 1.0, 0.7, 4.0);  // its second
  t.observe(80, 1.0, 0.7, 4.0);
  EXPECT_TRUE(t.observe(95, 1.0, 0.7, 4.0));  // slower than 100
  EXPECT_EQ(t.workers(), 1u);
  EXPECT_TRUE(t.settled());
}

// A step that gains less than 5% is kept, not taken back, and the tuner stops there: on a shared
// machine such a gain cannot be told from the intervals' noise, and a real one is worth keeping.
TEST(AutoTuner, ASmallGainIsKeptAndEndsTheTuning) {
  AutoTuner t(limits(4, 16));
  t.observe(100, 1.0, 0.5, 1.0);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, 1.0));  // 10 ms to fill, 5 ms to use: 2 workers
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, kBusy));  // warm-up
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, kBusy));  // its second
  EXPECT_FALSE(t.observe(95, 1.0, 0.5, kBusy));
  EXPECT_FALSE(t.observe(103, 1.0, 0.5, kBusy));  // 3% faster: kept, settled
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.describe(), "2 workers, prefetch 2 (auto: settled after 518 batches)");
}

// A worker added to a memory-mapped dataset runs its first pass well below its pace (it opens the
// dataset and fills its page tables): those intervals are not held against it.
TEST(AutoTuner, ANewWorkersWarmUpIsNotHeldAgainstIt) {
  AutoTuner t(limits(4, 16));
  t.observe(100, 1.0, 0.5, 1.0);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, 1.0));
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
  t.observe(100, 1.0, 0.1, 0.8);
  // Waiting 10% though one worker fills a batch (8 ms) faster than the loop uses one (9 ms): one
  // more, judged, though it is every core.
  EXPECT_TRUE(t.observe(100, 1.0, 0.1, 0.8));
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.settled());
  EXPECT_FALSE(t.observe(10, 1.0, 0.9, kBusy));  // warm-up
  EXPECT_FALSE(t.observe(10, 1.0, 0.9, kBusy));  // its second
  t.observe(150, 1.0, 0.5, kIdle);
  EXPECT_TRUE(t.observe(150, 1.0, 0.5, kIdle));  // they wait for slots: the ring now 2 workers x 3
  EXPECT_EQ(t.prefetch(), 3u);
  EXPECT_EQ(t.depth(), 6u);
  t.observe(200, 1.0, 0.5, kIdle);
  EXPECT_TRUE(t.observe(200, 1.0, 0.5, kIdle));  // faster: set back to 2 x 2, to check it was the ring
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_FALSE(t.settled());
  EXPECT_FALSE(t.observe(195, 1.0, 0.5, kIdle));  // batches of the deeper ring still arrive: not judged
  t.observe(150, 1.0, 0.5, kIdle);
  EXPECT_TRUE(t.observe(150, 1.0, 0.5, kIdle));  // as slow as before it: 2 x 3 kept
  EXPECT_EQ(t.prefetch(), 3u);
  EXPECT_FALSE(t.settled());
  t.observe(200, 1.0, 0.5, kIdle);
  EXPECT_FALSE(t.observe(200, 1.0, 0.5, kIdle));  // nothing more fits the ring of 6
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.depth(), 6u);
}

// While the workers warm up (their first passes fill their page tables), throughput rises whatever
// the ring: a deeper ring that looked faster than the intervals before it, but not than the
// shallower ring measured again after it, is taken back.
TEST(AutoTuner, ADeeperRingThatOnlyRodeTheWarmUpIsTakenBack) {
  AutoTuner t(limits(1, 8));
  t.observe(100, 1.0, 0.5, kIdle);
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, kIdle));
  EXPECT_EQ(t.prefetch(), 3u);
  t.observe(108, 1.0, 0.5, kIdle);
  EXPECT_TRUE(t.observe(112, 1.0, 0.5, kIdle));  // 12% faster: set back to 2
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_EQ(t.min_seconds(), AutoTuner::kMinJudgedSeconds);
  EXPECT_FALSE(t.observe(110, 1.0, 0.5, kIdle));  // not judged
  t.observe(116, 1.0, 0.5, kIdle);
  EXPECT_FALSE(t.observe(118, 1.0, 0.5, kIdle));  // faster still without it: 2, settled
  EXPECT_EQ(t.prefetch(), 2u);
  EXPECT_TRUE(t.settled());
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
  AutoTuner t(limits(3, 12));
  t.observe(100, 1.0, 0.5, 1.0);  // one worker, busy the whole second: 2 needed
  EXPECT_TRUE(t.observe(100, 1.0, 0.5, 0.97));
  EXPECT_EQ(t.workers(), 2u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, 1.2));  // warm-up
  EXPECT_FALSE(t.observe(90, 1.0, 0.6, 1.6));  // its second
  t.observe(170, 1.0, 0.3, 1.96);
  EXPECT_TRUE(t.observe(175, 1.0, 0.3, 1.96));  // 75% faster, both busy 98%, still waiting: a third
  EXPECT_EQ(t.workers(), 3u);
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, 2.9));  // warm-up
  EXPECT_FALSE(t.observe(90, 1.0, 0.6, 2.9));  // its second
  t.observe(240, 1.0, 0.1, 2.94);
  EXPECT_FALSE(t.observe(245, 1.0, 0.1, 2.94));  // faster, all busy 98%: no worker left to add
  EXPECT_TRUE(t.settled());
  EXPECT_EQ(t.workers(), 3u);
  EXPECT_EQ(t.prefetch(), 2u);
}

// Busy workers that no worker can join may still idle a little: a deeper ring is tried, and taken
// back when it is slower.
TEST(AutoTuner, BusyWorkersThatIdleALittleTryADeeperRingAndKeepItOnlyIfFaster) {
  AutoTuner t(limits(2, 8));
  t.observe(100, 1.0, 0.1, 0.85);
  EXPECT_TRUE(t.observe(100, 1.0, 0.1, 0.85));  // 8.5 ms to fill, 9 ms to use: one more, judged
  EXPECT_FALSE(t.observe(60, 1.0, 0.6, 1.2));   // warm-up
  EXPECT_FALSE(t.observe(90, 1.0, 0.6, 1.6));   // its second
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
