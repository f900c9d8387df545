// loader/shm: the slots and who holds them; a Batch made of a slot holds what the consumer checked
// in it, as its own copy where a worker could still write.
#include "loader/shm/slot_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "loader/shm/shm_segment.h"
#include "stoker/batch.h"

namespace stoker::detail {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class SlotPoolTest : public ::testing::Test {
 protected:
  SlotPoolTest() {
    Schema schema;
    schema.num_samples = 100;
    schema.fields = {{"label", FieldKind::fixed, DType::i64, {}}};
    const SegmentLayout layout(schema, 4, 1);
    pool_ = std::make_shared<SlotPool>(ShmSegment::create_private(layout.segment_bytes(2)), layout, 2);
    s_ = *pool_->acquire();
    SlotHeader& h = pool_->view().slot_header(s_);
    h.num_samples = 4;
    h.status = static_cast<std::uint32_t>(SlotStatus::ok);
  }
  std::uint32_t* skipped() const { return pool_->view().slot_skipped(s_); }
  std::vector<std::uint32_t> skipped_of(const Batch& b) const { return {b.skipped().begin(), b.skipped().end()}; }
  // The positions of the batch made of the slot, which is then released and taken again.
  std::vector<std::uint32_t> delivered() {
    std::vector<std::uint32_t> out = skipped_of(pool_->make_batch(s_));
    EXPECT_EQ(*pool_->acquire(), s_);
    return out;
  }

  std::shared_ptr<SlotPool> pool_;
  std::uint32_t s_ = 0;
};

// A process that still maps the slot (a worker gone wrong, the child that read a batch again)
// cannot change the positions a delivered Batch lists.
TEST_F(SlotPoolTest, ABatchsSkippedPositionsAreItsOwnCopy) {
  skipped()[0] = 2;
  skipped()[1] = 0;
  skipped()[2] = 3;
  Batch b = pool_->make_batch(s_);
  skipped()[0] = 4;
  skipped()[1] = 1;
  skipped()[2] = 2;
  EXPECT_THAT(skipped_of(b), ElementsAre(0u, 3u));
  const std::byte* slot = pool_->view().slot_begin(s_);
  const auto* at = reinterpret_cast<const std::byte*>(b.skipped().data());
  EXPECT_FALSE(at >= slot && at < slot + pool_->view().slot_bytes()) << "the positions point into the slot";
}

// Positions at or past the batch's end, or not above the one before, end the list: a Batch's
// positions are always within it, whatever its slot holds.
TEST_F(SlotPoolTest, PositionsOutsideTheBatchAreNeverHandedOut) {
  skipped()[0] = 3;
  skipped()[1] = 1;
  skipped()[2] = 4;
  skipped()[3] = 2;
  EXPECT_THAT(delivered(), ElementsAre(1u));
  skipped()[0] = 1000;
  skipped()[1] = 0;
  skipped()[2] = 1;
  skipped()[3] = 2;
  skipped()[4] = 3;
  EXPECT_THAT(delivered(), ElementsAre(0u, 1u, 2u, 3u)) << "the count is cut at the batch's";
  skipped()[0] = 2;
  skipped()[1] = 2;
  skipped()[2] = 2;
  EXPECT_THAT(delivered(), ElementsAre(2u));
  skipped()[0] = 0;
  EXPECT_THAT(delivered(), IsEmpty());
}

}  // namespace
}  // namespace stoker::detail
