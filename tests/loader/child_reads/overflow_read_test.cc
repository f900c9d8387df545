// loader/child_reads: the read of a batch too large for its slot, in a child process and in this one,
// and the bound its bytes are counted against.
#include "loader/child_reads/overflow_read.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "base/posix_error.h"
#include "formats/core/reader.h"
#include "loader/shm/shm_segment.h"
#include "loader/shm/slot_pool.h"
#include "stoker/batch.h"
#include "tests/support/test_data.h"

namespace stoker::detail {
namespace {

using ::testing::HasSubstr;
using Bytes = std::vector<std::byte>;

// Bytes fields around fixed ones of two dtypes: "a" (bytes), "b" (i32 [2]), "c" (bytes), "d" (f64).
Schema mixed_schema() {
  Schema s;
  s.num_samples = 10;
  s.fields = {Field::bytes_field("a"), Field{"b", FieldKind::fixed, DType::i32, {2}}, Field::bytes_field("c"),
              Field{"d", FieldKind::fixed, DType::f64, {}}};
  return s;
}

Bytes a_sample(std::uint64_t i) {
  Bytes b(i == 7 ? 9000 : i * 3);  // sample 7 is the largest of "a"
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((i * 11 + k) & 0xff);
  return b;
}
Bytes c_sample(std::uint64_t i) { return Bytes(i % 4 + 1, static_cast<std::byte>(0xc0 + i)); }
std::int32_t b_value(std::uint64_t i, std::size_t k) { return static_cast<std::int32_t>(i * 10 + k) - 50; }
double d_value(std::uint64_t i) { return static_cast<double>(i) / 4; }

// A reader of mixed_schema() whose every value is a function of the sample's index.
class FunctionReader final : public formats::Reader {
 public:
  const Schema& schema() const override { return schema_; }
  void read(std::span<const std::uint64_t> indices, std::span<const formats::FieldOut> out) override {
    for (std::size_t k = 0; k < indices.size(); ++k) {
      const std::uint64_t i = indices[k];
      const Bytes a = a_sample(i), c = c_sample(i);
      std::copy(a.begin(), a.end(), out[0].bytes->append(a.size()));
      std::copy(c.begin(), c.end(), out[2].bytes->append(c.size()));
      const std::int32_t b[2] = {b_value(i, 0), b_value(i, 1)};
      std::memcpy(out[1].fixed + k * sizeof b, b, sizeof b);
      const double d = d_value(i);
      std::memcpy(out[3].fixed + k * sizeof d, &d, sizeof d);
    }
  }

 private:
  Schema schema_ = mixed_schema();
};

// A ring of one slot (memory shared with the children this process forks, as the loader's) holding
// batch 3 of epoch 2, samples 9, 2, 7 and 0, marked too large.
class OverflowRead : public ::testing::Test {
 protected:
  OverflowRead() {
    const SegmentLayout layout(schema_, 4, 1, {64, 0, 64, 0});
    pool_ = std::make_shared<SlotPool>(ShmSegment::create_private(layout.segment_bytes(1)), layout, 1);
    s_ = *pool_->acquire();
    SlotHeader& h = view().slot_header(s_);
    h.task_id = h.batch_index = 3;
    h.epoch = 2;
    h.num_samples = 4;
    h.status = static_cast<std::uint32_t>(SlotStatus::too_large);
    std::copy(indices_.begin(), indices_.end(), view().slot_indices(s_));
  }
  const SegmentView& view() const { return pool_->view(); }
  BatchFiller filler() {
    return BatchFiller(LazyReader(std::make_unique<FunctionReader>(), "mixed.h5"), SamplePipelines());
  }

  Schema schema_ = mixed_schema();
  std::vector<std::uint64_t> indices_{9, 2, 7, 0};
  std::shared_ptr<SlotPool> pool_;
  std::uint32_t s_ = 0;
};

// The batch made of slot s and `outside` holds exactly the function's values.
void expect_exact(const Batch& b, const std::vector<std::uint64_t>& indices) {
  ASSERT_EQ(b.size(), indices.size());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::uint64_t i = indices[k];
    const auto a = b["a"].sample(k), c = b["c"].sample(k);
    EXPECT_EQ(Bytes(a.begin(), a.end()), a_sample(i)) << "sample " << i;
    EXPECT_EQ(Bytes(c.begin(), c.end()), c_sample(i)) << "sample " << i;
    EXPECT_EQ(b["b"].as<std::int32_t>()[2 * k], b_value(i, 0));
    EXPECT_EQ(b["b"].as<std::int32_t>()[2 * k + 1], b_value(i, 1));
    EXPECT_EQ(b["d"].as<double>()[k], d_value(i));
  }
}

TEST_F(OverflowRead, AChildSendsTheBytesFieldsAndWritesTheFixedOnesIntoTheSlot) {
  BatchFiller f = filler();
  OutsideBytes outside = read_overflow_in_child(f, view(), s_, schema_, {}, "mixed.h5", std::chrono::seconds(60));
  ASSERT_EQ(outside.fields.size(), 4u);
  EXPECT_TRUE(outside.fields[1].offsets.empty()) << "a fixed field is in the slot, not outside";
  EXPECT_EQ(outside.fields[0].offsets.size(), 5u);
  EXPECT_EQ(outside.fields[0].offsets.back(), 27u + 6 + 9000);
  // One buffer, each field where any dtype may start: the next multiple of alignof(max_align_t).
  constexpr std::size_t kAlign = alignof(std::max_align_t);
  EXPECT_EQ(outside.fields[2].data,
            outside.fields[0].data + (outside.fields[0].offsets.back() + kAlign - 1) / kAlign * kAlign)
      << "the bytes fields' data lie in one buffer, each field aligned";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(outside.fields[2].data) % kAlign, 0u);
  expect_exact(pool_->make_batch(s_, std::move(outside)), indices_);
  EXPECT_THAT(test::descendants(), ::testing::IsEmpty());
}

TEST_F(OverflowRead, WithoutWorkersTheBatchIsReadHereTheSameWay) {
  BatchFiller f = filler();
  expect_exact(pool_->make_batch(s_, read_overflow_here(f, view(), s_, schema_, {}, "mixed.h5")), indices_);
}

TEST_F(OverflowRead, ABatchOverItsBoundIsRefusedNamingItsLargestSamplesAndTheBound) {
  const OverflowBound bound{9000, "the bound's reason", "what to do about it"};
  const std::uint64_t total = 27 + 6 + 9000 + (2 + 3 + 4 + 1);
  for (bool in_child : {true, false}) {
    SCOPED_TRACE(in_child ? "in a child" : "here");
    BatchFiller f = filler();
    test::expect_error(ErrorCode::dataset,
                       [&] {
                         if (in_child) {
                           read_overflow_in_child(f, view(), s_, schema_, bound, "mixed.h5", std::chrono::seconds(60));
                         } else {
                           read_overflow_here(f, view(), s_, schema_, bound, "mixed.h5");
                         }
                       },
                       {"mixed.h5: batch 3 of epoch 2, too large for its slot and read again: its bytes fields hold " +
                            format_bytes(total),
                        "'a' " + format_bytes(27 + 6 + 9000) + ", its largest sample 7 of " + format_bytes(9000),
                        "'c' " + format_bytes(10) + ", its largest sample 7 of " + format_bytes(4),
                        "more than a batch read again may take", ": the bound's reason: what to do about it"});
    EXPECT_THAT(test::descendants(), ::testing::IsEmpty()) << "the child is killed and waited for";
  }
  // At the bound, it is taken.
  BatchFiller f = filler();
  const OverflowBound exact{total, "", ""};
  expect_exact(pool_->make_batch(s_, read_overflow_in_child(f, view(), s_, schema_, exact, "mixed.h5", {})), indices_);
}

TEST_F(OverflowRead, TheChildsErrorIsTheBatchsWithItsCode) {
  class Failing final : public formats::Reader {
   public:
    const Schema& schema() const override { return schema_; }
    void read(std::span<const std::uint64_t>, std::span<const formats::FieldOut>) override {
      throw Error(ErrorCode::io, "mixed.h5: read of 9000 bytes at offset 4096: Input/output error (EIO)");
    }
    Schema schema_ = mixed_schema();
  };
  BatchFiller f(LazyReader(std::make_unique<Failing>(), "mixed.h5"), SamplePipelines());
  test::expect_error(ErrorCode::io, [&] { read_overflow_in_child(f, view(), s_, schema_, {}, "mixed.h5", {}); },
                     {"mixed.h5: batch 3 of epoch 2, too large for its slot and read again: mixed.h5: read of 9000 "
                      "bytes at offset 4096: Input/output error (EIO)"});
}

// A child gone wrong (a decoder bug in it, say) writes into the slot it shares with the consumer:
// here, once it has read the batch, it rewrites the batch's sample indices, or its epoch. The
// consumer does not take such a batch for the task's: the answer is malformed.
TEST_F(OverflowRead, AChildThatRewritesTheSlotsTaskAnswersMalformed) {
  class Rewriting final : public formats::Reader {
   public:
    Rewriting(const SegmentView& view, std::uint32_t s, bool indices) : view_(view), s_(s), indices_(indices) {}
    const Schema& schema() const override { return inner_.schema(); }
    void read(std::span<const std::uint64_t> indices, std::span<const formats::FieldOut> out) override {
      inner_.read(indices, out);
      if (indices_) {
        view_.slot_indices(s_)[1] = 5;
      } else {
        view_.slot_header(s_).epoch = 7;
      }
    }

   private:
    FunctionReader inner_;
    const SegmentView& view_;
    std::uint32_t s_;
    bool indices_;
  };
  const std::pair<bool, const char*> cases[] = {
      {true, "it rewrote the batch's sample indices"},
      {false, "it rewrote the slot's header (task 3, epoch 7, batch 3 of 4 samples, status 3)"}};
  for (const auto& [indices, why] : cases) {
    SCOPED_TRACE(why);
    BatchFiller f(LazyReader(std::make_unique<Rewriting>(view(), s_, indices), "mixed.h5"), SamplePipelines());
    test::expect_error(
        ErrorCode::internal,
        [&] { read_overflow_in_child(f, view(), s_, schema_, {}, "mixed.h5", std::chrono::seconds(60)); },
        {std::string("mixed.h5: batch 3 of epoch 2, too large for its slot and read again: the process "
                     "that read it answered malformed: ") +
         why});
    EXPECT_THAT(test::descendants(), ::testing::IsEmpty());
  }
}

// What the consumer checks in a slot once its batch was read again: the task as it wrote it, and
// the skipped samples' record the child wrote, as a worker's (a count within the batch, positions
// ascending and below it, notes within their region).
TEST_F(OverflowRead, TheSlotReadAgainIsCheckedLikeAWorkersSlot) {
  const SlotHeader before = view().slot_header(s_);
  const auto check = [&] { return check_slot_read_again(view(), s_, before, indices_); };
  std::uint32_t* skipped = view().slot_skipped(s_);
  skipped[0] = 2;
  skipped[1] = 1;
  skipped[2] = 3;
  EXPECT_EQ(check(), "");
  skipped[2] = 9;
  EXPECT_EQ(check(), "skipped sample 1 is at position 9, not after 1 and below 4");
  skipped[2] = 1;
  EXPECT_EQ(check(), "skipped sample 1 is at position 1, not after 1 and below 4");
  skipped[0] = 5;
  EXPECT_EQ(check(), "it records 5 skipped samples in a batch of 4");
  skipped[0] = 0;
  view().slot_header(s_).error_bytes = kErrorTextBytes + 1;
  EXPECT_EQ(check(), "its notes of 4097 bytes overrun their region of 4096");
  view().slot_header(s_).error_bytes = 0;
  view().slot_header(s_).num_samples = 3;
  EXPECT_EQ(check(), "it rewrote the slot's header (task 3, epoch 2, batch 3 of 3 samples, status 3)");
}

void write_file(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(OverflowBound, IsTheSmallerOfTheFilesSizeAndHalfTheMemoryAvailableSharedAmongRanks) {
  test::TempDir tmp;
  ShmEnvironment env;
  env.meminfo = tmp.path("meminfo");
  env.cgroup_root = tmp.path("cgroup");  // none: no limit
  env.proc_cgroup = tmp.path("proc-self-cgroup");
  write_file(env.meminfo, "MemTotal:       16384000 kB\nMemAvailable:    1000000 kB\n");
  OverflowBound b = overflow_bound(0, 1, env);
  EXPECT_EQ(b.bytes, 512'000'000u);
  EXPECT_THAT(b.what, HasSubstr("half of the " + format_bytes(1'024'000'000) + " of memory this process may"));
  EXPECT_THAT(b.advice, HasSubstr("give it more memory"));
  EXPECT_THAT(b.advice, HasSubstr("batch_size"));
  b = overflow_bound(0, 4, env);
  EXPECT_EQ(b.bytes, 128'000'000u);
  EXPECT_THAT(b.what, HasSubstr("shared among the 4 ranks on this node"));
  b = overflow_bound(40'000, 4, env);
  EXPECT_EQ(b.bytes, 40'000u);
  EXPECT_EQ(b.what, "the dataset's size on disk, " + format_bytes(40'000));
  EXPECT_THAT(b.advice, HasSubstr("the file claims samples larger than it holds: it is damaged or crafted"));
  EXPECT_EQ(overflow_bound(4'000'000'000, 1, env).bytes, 512'000'000u);
  // A memory cgroup with less headroom bounds it instead.
  write_file(env.proc_cgroup, "0::/job\n");
  std::filesystem::create_directories(tmp.path("cgroup/job"));
  write_file(tmp.path("cgroup/job/memory.max"), "300000000\n");
  write_file(tmp.path("cgroup/job/memory.current"), "100000000\n");
  EXPECT_EQ(overflow_bound(0, 1, env).bytes, 100'000'000u);
  // Nothing known: no bound.
  std::filesystem::remove(env.meminfo);
  std::filesystem::remove(env.proc_cgroup);
  EXPECT_EQ(overflow_bound(0, 1, env).bytes, UINT64_MAX);
}

}  // namespace
}  // namespace stoker::detail
