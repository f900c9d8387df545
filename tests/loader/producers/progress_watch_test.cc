// loader/producers: a worker is stuck only when it had work and made no progress while it could run.
#include "loader/producers/progress_watch.h"

#include <gtest/gtest.h>

namespace stoker::detail {
namespace {

using std::chrono::milliseconds;
using Clock = ProgressWatch::Clock;

class ProgressWatchTest : public ::testing::Test {
 protected:
  // One look at worker 0, `after` past the previous one.
  bool look(milliseconds after, std::uint64_t progress, bool has_work = true, bool stopped = false) {
    now_ += after;
    return watch_.look(
        0, progress, has_work, [=] { return stopped; }, now_);
  }
  ProgressWatch watch_{2, milliseconds(1000)};
  Clock::time_point now_{};
};

TEST_F(ProgressWatchTest, NoProgressWhileItCouldRunForTheTimeoutIsStuck) {
  EXPECT_FALSE(look(milliseconds(0), 7));  // the first look starts the clock
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(look(milliseconds(250), 7));
  EXPECT_EQ(watch_.stalled(0), milliseconds(750));
  EXPECT_TRUE(look(milliseconds(250), 7));
}

TEST_F(ProgressWatchTest, AnyProgressStartsTheClockAgain) {
  EXPECT_FALSE(look(milliseconds(0), 1));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(look(milliseconds(300), 1));
  EXPECT_FALSE(look(milliseconds(300), 2));  // a slow step, but a step
  EXPECT_EQ(watch_.stalled(0), milliseconds(0));
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(look(milliseconds(300), 2));
  EXPECT_TRUE(look(milliseconds(100), 2));
}

TEST_F(ProgressWatchTest, ASuspendedConsumerCountsOneStepNotThePause) {
  // The whole job was stopped for an hour: the consumer's next look is an hour later.
  EXPECT_FALSE(look(milliseconds(0), 5));
  EXPECT_FALSE(look(std::chrono::hours(1), 5));
  EXPECT_EQ(watch_.stalled(0), ProgressWatch::kMaxStep);
  // Four suspensions in a row are still not four hours; the worker's progress after each resets it.
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(look(milliseconds(10), 6 + i));
    EXPECT_FALSE(look(std::chrono::hours(1), 6 + i)) << "suspension " << i;
  }
}

TEST_F(ProgressWatchTest, AStoppedWorkerCountsNothing) {
  EXPECT_FALSE(look(milliseconds(0), 3));
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(look(milliseconds(250), 3, true, /*stopped=*/true));
  EXPECT_EQ(watch_.stalled(0), milliseconds(0));
}

// A consumer taking batches as fast as they come looks every few microseconds: whether the worker
// is stopped (a read of /proc) is asked once per kMinStep, and the time still all counts.
TEST(ProgressWatch, LooksCloserThanTheMinimumStepAskNothingAndLoseNoTime) {
  ProgressWatch w(1, milliseconds(1000));
  Clock::time_point t{};
  int asked = 0;
  const auto stopped = [&] {
    ++asked;
    return false;
  };
  EXPECT_FALSE(w.look(0, 4, true, stopped, t));
  for (int i = 0; i < 999; ++i) {
    t += milliseconds(1);
    EXPECT_FALSE(w.look(0, 4, true, stopped, t));
  }
  EXPECT_EQ(asked, 999 / ProgressWatch::kMinStep.count());
  EXPECT_EQ(w.stalled(0), milliseconds(990));
  t += milliseconds(10);
  EXPECT_TRUE(w.look(0, 4, true, stopped, t));
}

TEST_F(ProgressWatchTest, AWorkerWithoutWorkIsNeverStuck) {
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(look(milliseconds(250), 3, /*has_work=*/false));
  // Work arrives: the clock starts at that look, not before.
  EXPECT_FALSE(look(milliseconds(250), 3));
  EXPECT_EQ(watch_.stalled(0), milliseconds(0));
}

TEST_F(ProgressWatchTest, AReplacementStartsFromZeroAndWorkersAreApart) {
  EXPECT_FALSE(look(milliseconds(0), 3));
  EXPECT_FALSE(look(milliseconds(400), 3));
  watch_.reset(0);
  EXPECT_FALSE(look(milliseconds(400), 3));
  EXPECT_EQ(watch_.stalled(0), milliseconds(0));
  EXPECT_EQ(watch_.stalled(1), milliseconds(0));
}

TEST(ProgressWatch, ATimeoutOfZeroIsNeverStuck) {
  ProgressWatch w(1, milliseconds(0));
  Clock::time_point t{};
  EXPECT_FALSE(w.look(
      0, 1, true, [] { return false; }, t));
  for (int i = 0; i < 10; ++i)
    EXPECT_FALSE(w.look(
        0, 1, true, [] { return false; }, t += std::chrono::seconds(1)));
}

}  // namespace
}  // namespace stoker::detail
