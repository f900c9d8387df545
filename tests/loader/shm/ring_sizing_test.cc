// Where the ring lives and how deep it is, for budgets made up in the test (no privileges needed;
// SmallDevShm in process_test.cc does it for real under a 64 MiB /dev/shm where it can mount one).
#include "loader/shm/ring_sizing.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/posix_error.h"
#include "tests/support/test_data.h"

namespace stoker::detail {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class RingSizing : public ::testing::Test {
 protected:
  Schema schema_ = test::small_schema(100);
  SegmentLayout layout_{schema_, 16, 2};
  RingRequest request_{2, 4, 0, 0.5};  // wants 8 slots, needs at least 2
  ShmBudget budget(std::uint64_t shm, std::uint64_t memory) {
    ShmBudget b;
    b.bytes = shm;
    b.shm_free = shm * 2;
    b.reason = "test /dev/shm";
    b.memory_bytes = memory;
    b.memory_available = memory * 2;
    b.memory_reason = "test memory";
    return b;
  }
};

TEST_F(RingSizing, DevShmWhenItHoldsTheWholeRing) {
  ReservedRing r = reserve_ring(layout_, request_, budget(layout_.segment_bytes(8), 1u << 30));
  EXPECT_EQ(r.backing, ShmBacking::dev_shm);
  EXPECT_EQ(r.depth, 8u);
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_FALSE(r.segment.memfd());
}

TEST_F(RingSizing, MemfdAtFullDepthWhenDevShmIsSmall) {
  ReservedRing r = reserve_ring(layout_, request_, budget(layout_.segment_bytes(3), 1u << 30));
  EXPECT_EQ(r.backing, ShmBacking::memfd);
  EXPECT_EQ(r.depth, 8u);
  EXPECT_TRUE(r.segment.memfd());
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_THAT(r.warnings[0], HasSubstr("/dev/shm cannot hold the ring"));
  EXPECT_THAT(r.warnings[0], HasSubstr("of memfd memory instead"));
  // The memory is usable through the whole mapping.
  std::fill(r.segment.data(), r.segment.data() + r.segment.size(), std::byte{7});
  EXPECT_EQ(r.segment.data()[r.segment.size() - 1], std::byte{7});
}

TEST_F(RingSizing, EitherBackingCanBeForced) {
  ReservedRing shm = reserve_ring(layout_, request_, budget(layout_.segment_bytes(3), 1u << 30), ShmBacking::dev_shm);
  EXPECT_EQ(shm.backing, ShmBacking::dev_shm);
  EXPECT_EQ(shm.depth, 3u);
  ASSERT_EQ(shm.warnings.size(), 1u);
  EXPECT_THAT(shm.warnings[0], HasSubstr("ring lowered from 8 to 3"));
  ReservedRing mem = reserve_ring(layout_, request_, budget(1u << 30, 1u << 30), ShmBacking::memfd);
  EXPECT_EQ(mem.backing, ShmBacking::memfd);
  EXPECT_EQ(mem.depth, 8u);
  EXPECT_TRUE(mem.warnings.empty());
}

TEST_F(RingSizing, RefusedOnlyWhenMemoryItselfIsShortWithTheNumbers) {
  const std::uint64_t small = layout_.segment_bytes(2) - 1;
  try {
    reserve_ring(layout_, request_, budget(small, small));
    FAIL() << "no refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shm) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("not enough shared memory for 2 workers: needs " +
                                    detail::format_bytes(layout_.segment_bytes(2))));
    EXPECT_THAT(e.what(), HasSubstr("in /dev/shm (test /dev/shm)"));
    EXPECT_THAT(e.what(), HasSubstr("of memory (test memory)"));
    EXPECT_THAT(e.what(), HasSubstr("Start the container with --shm-size="));
    EXPECT_THAT(e.what(), HasSubstr("or free memory on this machine; or use fewer workers, or smaller batches"));
  }
  // With room in memory but not in /dev/shm, forcing /dev/shm refuses, naming its budget, the
  // container's /dev/shm to grow and the backing that would hold it.
  try {
    reserve_ring(layout_, request_, budget(small, 1u << 30), ShmBacking::dev_shm);
    FAIL() << "no refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shm) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("but the budget is"));
    EXPECT_THAT(e.what(), HasSubstr("memfd memory would hold it (ShmBacking::automatic)"));
    EXPECT_THAT(e.what(), HasSubstr("Start the container with --shm-size="));
  }
  // Neither holds the whole ring: the deeper one, lowered, with both warnings.
  ReservedRing r = reserve_ring(layout_, request_, budget(layout_.segment_bytes(3), layout_.segment_bytes(5)));
  EXPECT_EQ(r.backing, ShmBacking::memfd);
  EXPECT_EQ(r.depth, 5u);
  EXPECT_EQ(r.warnings.size(), 2u);
}

// The slots the training loop keeps its batches in come on top of the workers' window, wanted and
// least alike: kept batches never shrink the window, nor leave a worker without a slot.
TEST_F(RingSizing, BatchesTheLoopKeepsHaveSlotsOfTheirOwn) {
  const RingRequest held{2, 4, 1, 0.5};
  EXPECT_EQ(held.wanted(), 9u);
  EXPECT_EQ(held.least(), 3u);
  ReservedRing whole = reserve_ring(layout_, held, budget(layout_.segment_bytes(9), 1u << 30));
  EXPECT_EQ(whole.depth, 9u);
  EXPECT_TRUE(whole.warnings.empty());
  ReservedRing lowered = reserve_ring(layout_, held, budget(layout_.segment_bytes(5), 1u << 30), ShmBacking::dev_shm);
  EXPECT_EQ(lowered.depth, 5u);
  ASSERT_EQ(lowered.warnings.size(), 1u);
  EXPECT_THAT(lowered.warnings[0],
              HasSubstr("ring lowered from 9 to 5 batches (2 workers x prefetch 4 + 1 held needs"));
  try {
    reserve_ring(layout_, held, budget(layout_.segment_bytes(3) - 1, layout_.segment_bytes(3) - 1));
    FAIL() << "no refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shm) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("not enough shared memory for 2 workers and 1 held batch (Options::held_batches): "
                                    "needs " +
                                    detail::format_bytes(layout_.segment_bytes(3)) + " (3 batch slots"));
    EXPECT_THAT(e.what(),
                HasSubstr("use fewer workers, fewer held batches (Options::held_batches), or smaller batches"));
  }
}

TEST_F(RingSizing, TheAdviceRaisesWhatHeldTheRingBack) {
  const std::uint64_t small = layout_.segment_bytes(2) - 1;
  const auto refusal = [&](BudgetBound shm, BudgetBound memory, ShmBacking backing) {
    ShmBudget b = budget(small, small);
    b.bound = shm;
    b.memory_bound = memory;
    try {
      reserve_ring(layout_, request_, b, backing);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::shm) << e.what();
      return std::string(e.what());
    }
    return std::string("no refusal");
  };
  const std::string option = "Raise the shm budget option (Options::shm_budget) to " +
                             detail::format_bytes(layout_.segment_bytes(2)) + " or more; or use fewer workers";
  EXPECT_THAT(refusal(BudgetBound::option, BudgetBound::option, ShmBacking::automatic), HasSubstr(option));
  EXPECT_THAT(refusal(BudgetBound::option, BudgetBound::option, ShmBacking::automatic), Not(HasSubstr("--shm-size")));
  EXPECT_THAT(refusal(BudgetBound::shm_space, BudgetBound::option, ShmBacking::memfd), HasSubstr(option));
  EXPECT_THAT(refusal(BudgetBound::cgroup, BudgetBound::cgroup, ShmBacking::dev_shm),
              HasSubstr("Raise the container's memory limit (docker run --memory); or use fewer workers"));
  EXPECT_THAT(refusal(BudgetBound::shm_space, BudgetBound::available_memory, ShmBacking::memfd),
              HasSubstr("Free memory on this machine; or use fewer workers"));
  EXPECT_THAT(refusal(BudgetBound::shm_space, BudgetBound::unknown, ShmBacking::memfd),
              HasSubstr("(test memory). Use fewer workers, or smaller batches"));
}

}  // namespace
}  // namespace stoker::detail
