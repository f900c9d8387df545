// loader/shm: a segment's header says what its layout is, and a layout refuses a segment it did
// not make (a fork server or worker from another build must not write into it).
#include "loader/shm/segment_layout.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "loader/shm/sample_bytes.h"

namespace stoker::detail {
namespace {

using ::testing::HasSubstr;

Schema image_and_label() {
  Schema s;
  s.num_samples = 100;
  s.fields = {{"image", FieldKind::fixed, DType::u8, {3, 8, 8}}, {"label", FieldKind::fixed, DType::i64, {}}};
  return s;
}

TEST(SegmentLayout, ASegmentChecksOutAgainstTheLayoutThatMadeItAndNoOther) {
  const SegmentLayout layout(image_and_label(), 16, 2);
  std::vector<std::byte> segment(layout.segment_bytes(4));
  layout.initialize(segment.data(), 4);
  EXPECT_EQ(layout.check(segment.data(), segment.size()), "");

  EXPECT_THAT(SegmentLayout(image_and_label(), 32, 2).check(segment.data(), segment.size()),
              HasSubstr("batch_size is 16, this loader's layout makes 32"));
  EXPECT_THAT(SegmentLayout(image_and_label(), 16, 3).check(segment.data(), segment.size()),
              HasSubstr("num_workers is 2"));
  Schema other = image_and_label();
  other.fields[1].dtype = DType::i32;
  EXPECT_THAT(SegmentLayout(other, 16, 2).check(segment.data(), segment.size()),
              HasSubstr("field 1 is laid out differently from field 'label'"));
  EXPECT_THAT(layout.check(segment.data(), segment.size() - 4096), HasSubstr("segment_bytes"));

  std::vector<std::byte> older = segment;
  std::uint32_t version = kSegmentVersion - 1;
  std::memcpy(older.data() + 8, &version, sizeof version);
  EXPECT_THAT(
      layout.check(older.data(), older.size()),
      HasSubstr(fmt::format("layout version {}, this stoker reads version {}", kSegmentVersion - 1, kSegmentVersion)));
  older[0] = std::byte{'X'};
  EXPECT_THAT(layout.check(older.data(), older.size()), HasSubstr("does not start with STOKERSM"));
}

TEST(SegmentView, AnErrorKeepsItsCodeAndAnUnknownCodeIsInternal) {
  const SegmentLayout layout(image_and_label(), 16, 1);
  std::vector<std::byte> segment(layout.segment_bytes(2));
  layout.initialize(segment.data(), 2);
  const SegmentView view(segment.data(), layout);
  view.set_error(1, ErrorCode::dataset, "d.h5: sample 3: corrupt");
  EXPECT_EQ(view.slot_error_of(1).code(), ErrorCode::dataset);
  EXPECT_STREQ(view.slot_error_of(1).what(), "d.h5: sample 3: corrupt");
  view.slot_header(1).error_code = 999;  // a worker gone wrong
  EXPECT_EQ(view.slot_error_of(1).code(), ErrorCode::internal);
}

// A slot's regions do not overlap: a batch that skips every one of its samples records batch_size
// positions, and the error text before them and field 0 after them stay as they were, whatever the
// batch size (one whose record fills its region to the byte, and one that leaves room).
TEST(SegmentView, TheSkippedRecordOfAWholeBatchLeavesTheErrorTextAndField0Untouched) {
  for (const std::size_t batch_size : {15u, 16u, 1u}) {
    SCOPED_TRACE(batch_size);
    const SegmentLayout layout(image_and_label(), batch_size, 1);
    std::vector<std::byte> segment(layout.segment_bytes(1));
    layout.initialize(segment.data(), 1);
    const SegmentView view(segment.data(), layout);
    const std::size_t field0 = 3 * 8 * 8 * batch_size;
    std::memset(view.slot_error(0), 'e', kErrorTextBytes);
    std::memset(view.slot_field(0, 0), 0xf0, field0);
    std::uint32_t* skipped = view.slot_skipped(0);
    skipped[0] = static_cast<std::uint32_t>(batch_size);
    for (std::uint32_t k = 0; k < batch_size; ++k) skipped[1 + k] = k;
    EXPECT_EQ(std::string(view.slot_error(0), kErrorTextBytes), std::string(kErrorTextBytes, 'e'));
    EXPECT_EQ(std::vector<std::byte>(view.slot_field(0, 0), view.slot_field(0, 0) + field0),
              std::vector<std::byte>(field0, std::byte{0xf0}));
    view.slot_header(0).num_samples = static_cast<std::uint32_t>(batch_size);
    EXPECT_EQ(view.check_skipped(0, static_cast<std::uint32_t>(batch_size)), "");
  }
}

// The error text or notes a slot holds are read within their region, whatever its header says.
TEST(SegmentView, TheTextOfASlotIsReadWithinItsRegion) {
  const SegmentLayout layout(image_and_label(), 4, 1);
  std::vector<std::byte> segment(layout.segment_bytes(1));
  layout.initialize(segment.data(), 1);
  const SegmentView view(segment.data(), layout);
  view.set_skip_notes(0, "2 d.h5: field 'image', sample 9: corrupt JPEG\n");
  EXPECT_EQ(view.error(0), "2 d.h5: field 'image', sample 9: corrupt JPEG\n");
  std::memset(view.slot_error(0), 'n', kErrorTextBytes);
  view.slot_header(0).error_bytes = 1u << 30;  // a worker gone wrong
  EXPECT_EQ(view.error(0), std::string(kErrorTextBytes, 'n'));
  EXPECT_EQ(view.slot_error_of(0).what(), std::string(kErrorTextBytes, 'n'));
}

TEST(SlotSizing, BytesPerSampleFollowTheTypicalSampleWithinWhatTheFileCanHold) {
  using detail::slot_bytes_per_sample;
  // Twice the typical sample, at least 4 KiB.
  EXPECT_EQ(slot_bytes_per_sample(100'000, 50'000'000, true, 1ull << 40, 256), 200'000u);
  EXPECT_EQ(slot_bytes_per_sample(100, 0, false, 0, 256), 4096u);
  // Never more than an exact bound.
  EXPECT_EQ(slot_bytes_per_sample(100'000, 150'000, true, 1ull << 40, 256), 150'000u);
  // Never more than the file's bytes shared over a batch: a 110 KB file reserves no gigabytes.
  EXPECT_EQ(slot_bytes_per_sample(1ull << 33, 1ull << 33, false, 110'000, 256), 430u);
  // Capped by the largest sample stoker takes.
  EXPECT_EQ(slot_bytes_per_sample(1ull << 62, 0, false, 0, 1), kMaxSampleBytes);
}

}  // namespace
}  // namespace stoker::detail
