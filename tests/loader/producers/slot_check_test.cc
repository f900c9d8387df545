// loader/producers: what the consumer checks in a slot a worker filled.
#include "loader/producers/slot_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "loader/plan/sampler.h"
#include "loader/producers/slot_task.h"

namespace stoker::detail {
namespace {

using ::testing::HasSubstr;

Schema jpeg_and_label() {
  Schema s;
  s.num_samples = 100;
  s.fields = {{"jpeg", FieldKind::bytes, DType::u8, {}}, {"label", FieldKind::fixed, DType::i64, {}}};
  return s;
}

class SlotCheck : public ::testing::Test {
 protected:
  SlotCheck() {
    EXPECT_EQ(plan_.num_batches, 25u);
    memory_.resize(layout_.segment_bytes(2) / sizeof(std::uint64_t) + 1);
    base_ = reinterpret_cast<std::byte*>(memory_.data());
    layout_.initialize(base_, 2);
    view_ = SegmentView(base_, layout_);
    digest_ = write_task(view_, 1, plan_, 5);
    // A well-formed answer: four samples of 1, 2, 3 and 4 bytes.
    std::uint64_t* offsets = view_.slot_offsets(1, 0);
    for (int k = 0; k <= 4; ++k) offsets[k] = static_cast<std::uint64_t>(k * (k + 1) / 2);
    header().status = static_cast<std::uint32_t>(SlotStatus::ok);
  }
  SlotHeader& header() { return view_.slot_header(1); }
  std::string check() { return check_filled_slot(view_, schema_, 1, plan_, 5, digest_); }
  std::uint64_t digest_ = 0;

  Schema schema_ = jpeg_and_label();
  EpochPlan plan_ = Sampler(100, 4, Order::random, 9, {}, false).plan(3);  // batch 5: 4 shuffled samples
  SegmentLayout layout_{schema_, 4, 1, {1000, 0}};
  std::vector<std::uint64_t> memory_;
  std::byte* base_ = nullptr;
  SegmentView view_;
};

TEST_F(SlotCheck, AWellFormedSlotPasses) {
  EXPECT_EQ(check(), "");
  header().status = static_cast<std::uint32_t>(SlotStatus::error);
  header().error_bytes = kErrorTextBytes;
  EXPECT_EQ(check(), "");
  header().status = static_cast<std::uint32_t>(SlotStatus::too_large);
  header().needed_bytes = 5000;
  EXPECT_EQ(check(), "");
}

TEST_F(SlotCheck, AHeaderThatIsNotTheTaskIsRefused) {
  header().num_samples = 1'000'000'000;
  EXPECT_THAT(check(), HasSubstr("batch 5 of 1000000000 samples; the consumer asked for batch 5 of epoch 3, 4"));
  header().num_samples = 4;
  header().batch_index = 6;
  EXPECT_THAT(check(), HasSubstr("its header says task 5, epoch 3, batch 6"));
  header().batch_index = 5;
  header().epoch = 2;
  EXPECT_THAT(check(), HasSubstr("epoch 2"));
  header().epoch = 3;
  view_.slot_indices(1)[2] = (plan_.sample(5 * 4 + 2) + 1) % 100;
  EXPECT_EQ(check(), "its sample indices are not the task's");
}

TEST_F(SlotCheck, AStatusNoWorkerWritesIsRefused) {
  header().status = 9;
  EXPECT_EQ(check(), "its status is 9, which no stoker worker writes");
  header().status = static_cast<std::uint32_t>(SlotStatus::empty);
  EXPECT_EQ(check(), "its status is 0, which no stoker worker writes");
}

TEST_F(SlotCheck, AnErrorTextPastItsRegionIsRefused) {
  header().status = static_cast<std::uint32_t>(SlotStatus::error);
  header().error_bytes = kErrorTextBytes + 1;
  EXPECT_THAT(check(), HasSubstr("overruns its region of 4096"));
}

TEST_F(SlotCheck, OffsetsMustStartAtZeroRiseAndEndWithinTheRegion) {
  std::uint64_t* offsets = view_.slot_offsets(1, 0);
  offsets[0] = 1;
  EXPECT_THAT(check(), HasSubstr("field 'jpeg': its offsets start at 1, not 0"));
  offsets[0] = 0;
  offsets[2] = 100;
  EXPECT_THAT(check(), HasSubstr("offset 3 (6) is below offset 2 (100)"));
  offsets[2] = 3;
  offsets[4] = view_.data_capacity(0) + 1;
  EXPECT_THAT(check(), HasSubstr("overrun the field's region"));
  offsets[4] = view_.data_capacity(0);
  EXPECT_EQ(check(), "");
}

TEST_F(SlotCheck, SkippedSamplesMustBeWithinTheBatchAndAscending) {
  std::uint32_t* skipped = view_.slot_skipped(1);
  skipped[0] = 2;
  skipped[1] = 1;
  skipped[2] = 3;
  EXPECT_EQ(check(), "");
  skipped[2] = 1;
  EXPECT_EQ(check(), "skipped sample 1 is at position 1, not after 1 and below 4");
  skipped[2] = 4;
  EXPECT_EQ(check(), "skipped sample 1 is at position 4, not after 1 and below 4");
  skipped[0] = 5;
  EXPECT_EQ(check(), "it records 5 skipped samples in a batch of 4");
  skipped[0] = 0;
  header().error_bytes = kErrorTextBytes + 1;  // the skipped samples' notes
  EXPECT_EQ(check(), "its notes of 4097 bytes overrun their region of 4096");
  header().status = static_cast<std::uint32_t>(SlotStatus::too_large);
  header().needed_bytes = 5000;
  EXPECT_EQ(check(), "its notes of 4097 bytes overrun their region of 4096");
}

TEST_F(SlotCheck, TooLargeByNothingIsRefused) {
  header().status = static_cast<std::uint32_t>(SlotStatus::too_large);
  header().needed_bytes = 0;
  EXPECT_EQ(check(), "it is too large by 0 bytes");
}

}  // namespace
}  // namespace stoker::detail
