// loader: the consumer's account of skipped samples: counted at each delivery, listed and warned of
// once, the worker's notes read as text from another process (escaped, within their region).
#include "loader/skipped_samples.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "loader/shm/shm_segment.h"
#include "loader/shm/slot_pool.h"

namespace stoker::detail {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class SkippedSamplesTest : public ::testing::Test {
 protected:
  SkippedSamplesTest() {
    Schema schema;
    schema.num_samples = 100;
    schema.fields = {{"image", FieldKind::fixed, DType::u8, {2, 2, 3}}};
    const SegmentLayout layout(schema, 4, 1);
    pool_ = std::make_shared<SlotPool>(ShmSegment::create_private(layout.segment_bytes(1)), layout, 1);
    s_ = *pool_->acquire();
    SlotHeader& h = view().slot_header(s_);
    h.epoch = 1;
    h.batch_index = 3;
    h.num_samples = 4;
    h.status = static_cast<std::uint32_t>(SlotStatus::ok);
    const std::uint64_t indices[4] = {40, 41, 42, 43};
    std::copy(std::begin(indices), std::end(indices), view().slot_indices(s_));
    std::uint32_t* skipped = view().slot_skipped(s_);
    skipped[0] = 2;
    skipped[1] = 1;
    skipped[2] = 2;
  }
  const SegmentView& view() const { return pool_->view(); }
  std::vector<std::string> take() {
    Batch b = pool_->make_batch(s_);
    std::vector<std::string> w = skipped_.take(b, view().error(s_), stats_);
    b.release();
    EXPECT_EQ(*pool_->acquire(), s_);
    return w;
  }

  std::shared_ptr<SlotPool> pool_;
  std::uint32_t s_ = 0;
  SkippedSamples skipped_{"d.h5"};
  Stats stats_;
};

// A worker's notes are another process's text: a control character in them (a worker gone wrong,
// or a message no one escaped) reaches the warning escaped, and notes are read within their 4096
// bytes whatever the slot's header claims.
TEST_F(SkippedSamplesTest, TheWorkersNotesReachTheWarningsEscaped) {
  view().set_skip_notes(s_,
                        "1 d.h5: field 'image', sample 41: bad \x1b[2J\r\x07"
                        "bytes\n2 d.h5: field 'image', "
                        "sample 42: corrupt JPEG\n");
  view().slot_header(s_).error_bytes = 1u << 30;  // read within the region all the same
  const std::vector<std::string> w = take();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_THAT(w[0], HasSubstr("d.h5: field 'image', sample 41: bad \\x1b[2J\\r\\x07bytes; skipped ("));
  EXPECT_THAT(w[0], HasSubstr("(batch 3 of epoch 1, position 1)"));
  EXPECT_THAT(w[0], Not(HasSubstr("\x1b")));
  EXPECT_THAT(w[1], HasSubstr("d.h5: field 'image', sample 42: corrupt JPEG; skipped ("));
  EXPECT_EQ(stats_.skipped_samples, 2u);
  EXPECT_THAT(stats_.skipped_indices, ElementsAre(41u, 42u));
}

// A sample is counted at each delivery and warned of the first time only; one that failed in two
// fields has a warning for each.
TEST_F(SkippedSamplesTest, EachFieldThatFailedIsWarnedOfOnceAndTheSampleCountedAtEachDelivery) {
  view().set_skip_notes(s_,
                        "1 d.h5: field 'image', sample 41: corrupt JPEG\n1 d.h5: field 'mask', sample 41: "
                        "corrupt PNG\n");
  const std::vector<std::string> first = take();
  ASSERT_EQ(first.size(), 3u);
  EXPECT_THAT(first[0], HasSubstr("field 'image', sample 41: corrupt JPEG"));
  EXPECT_THAT(first[1], HasSubstr("field 'mask', sample 41: corrupt PNG"));
  EXPECT_THAT(first[2], HasSubstr("d.h5: sample 42: skipped (")) << "its reason was not in the notes";
  EXPECT_THAT(first[2], HasSubstr("the decoder's reason was cut"));
  EXPECT_THAT(take(), ::testing::IsEmpty());
  EXPECT_EQ(stats_.skipped_samples, 4u);
  EXPECT_THAT(stats_.skipped_indices, ElementsAre(41u, 42u));
}

}  // namespace
}  // namespace stoker::detail
