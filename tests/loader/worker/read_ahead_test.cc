// Read-ahead of samples that are not in the page cache: what the worker asks the kernel for. The
// hints (posix_fadvise, madvise WILLNEED) go through the Env seam, where the test records them
// and checks that each covers one of the batch's samples — its bytes are at the hinted place —
// and that nothing else is hinted. The kernel's response to a hint (which pages it reads, and
// when) depends on the machine's page cache and storage, so it is not what these tests observe.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/env.h"
#include "base/posix_error.h"
#include "base/unique_fd.h"
#include "formats/core/reader.h"
#include "loader/pipeline/pipeline.h"
#include "loader/shm/segment_layout.h"
#include "loader/worker/batch_filler.h"
#include "tests/support/test_data.h"

namespace stoker {
namespace {

constexpr std::uint64_t kSamples = 64;
constexpr std::int64_t kSampleBytes = 64 << 10;  // above detail::kReadAheadMinSampleBytes

Schema large_samples() {
  Schema s;
  s.num_samples = kSamples;
  s.fields = {{"image", FieldKind::fixed, DType::u8, {kSampleBytes}}};
  return s;
}

// An Env that records the read-ahead hints given in this process, and passes every call on.
class HintRecorder : public detail::Env {
 public:
  struct FileHint {
    int fd;
    off_t offset, length;
  };
  struct MemoryHint {
    const std::byte* begin;
    std::size_t length;
  };
  std::vector<FileHint> file_hints;
  std::vector<MemoryHint> memory_hints;

  HintRecorder() : previous_(detail::Env::install(this)) {}
  ~HintRecorder() override { detail::Env::install(previous_); }

  int posix_fadvise(int fd, off_t offset, off_t len, int advice) override {
    if (advice == POSIX_FADV_WILLNEED) file_hints.push_back({fd, offset, len});
    return Env::posix_fadvise(fd, offset, len, advice);
  }
  int madvise(void* addr, std::size_t len, int advice) override {
    if (advice == MADV_WILLNEED) memory_hints.push_back({static_cast<const std::byte*>(addr), len});
    return Env::madvise(addr, len, advice);
  }

 private:
  detail::Env* previous_;
};

// One slot of a two-slot segment for `schema`, holding the task "load `batch`".
class OneTask {
 public:
  OneTask(const Schema& schema, const std::vector<std::uint64_t>& batch)
      : layout_(schema, batch.size(), 1), segment_(layout_.segment_bytes(2)) {
    layout_.initialize(segment_.data(), 2);
    view_ = detail::SegmentView(segment_.data(), layout_);
    std::copy(batch.begin(), batch.end(), view_.slot_indices(kSlot));
    view_.slot_header(kSlot).num_samples = static_cast<std::uint32_t>(batch.size());
  }
  const detail::SegmentView& view() const { return view_; }
  static constexpr std::uint32_t kSlot = 1;

 private:
  detail::SegmentLayout layout_;
  std::vector<std::byte> segment_;
  detail::SegmentView view_;
};

const std::vector<std::uint64_t> kBatch = {41, 7, 58, 23};

// A worker's first batch is hinted before anything has been read, the dataset not even opened (the
// first batches are the ones a cold start waits for), and only that batch is: one hint per sample,
// in batch order, each ending where the sample's bytes end in the map (LMDB reads by mmap).
TEST(ReadAhead, AWorkersFirstLmdbBatchIsHintedBeforeItsFirstRead) {
  test::TempDir dir;
  const std::string path = dir.path("large.lmdb");
  const Schema schema = large_samples();
  test::write_lmdb(path, schema);
  OneTask task(schema, kBatch);
  HintRecorder hints;

  detail::BatchFiller filler(detail::LazyReader(path, formats::ReaderOptions{}, schema), detail::SamplePipelines());
  ASSERT_EQ(filler.reader().opened(), nullptr);
  filler.read_ahead(task.view(), OneTask::kSlot);
  EXPECT_NE(filler.reader().opened(), nullptr);

  EXPECT_TRUE(hints.file_hints.empty());
  ASSERT_EQ(hints.memory_hints.size(), kBatch.size());
  const long page = ::sysconf(_SC_PAGESIZE);
  for (std::size_t k = 0; k < kBatch.size(); ++k) {
    const HintRecorder::MemoryHint& h = hints.memory_hints[k];
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(h.begin) % static_cast<std::uintptr_t>(page), 0u);
    ASSERT_GE(h.length, static_cast<std::size_t>(kSampleBytes));
    EXPECT_LT(h.length, static_cast<std::size_t>(kSampleBytes + page)) << "more than sample " << kBatch[k];
    const std::vector<std::byte> want = test::expected_field(schema.fields[0], kBatch[k]);
    EXPECT_EQ(0, std::memcmp(h.begin + h.length - want.size(), want.data(), want.size()))
        << "hint " << k << " is not sample " << kBatch[k];
  }
  EXPECT_TRUE(filler.reader().opened()->schema() == schema);
}

// The same from an HDF5 file read straight from the file (contiguous and chunked): one posix_fadvise
// per sample, on the file's own descriptor, at the sample's offset and length.
TEST(ReadAhead, AWorkersFirstHdf5BatchIsHintedAtItsSamplesOffsets) {
  for (const auto layout :
       {formats::Hdf5WriteOptions::Layout::contiguous, formats::Hdf5WriteOptions::Layout::chunked}) {
    SCOPED_TRACE(layout == formats::Hdf5WriteOptions::Layout::chunked ? "chunked" : "contiguous");
    test::TempDir dir;
    const std::string path = dir.path("large.h5");
    const Schema schema = large_samples();
    test::write_hdf5(path, schema, {layout, 4, 0});
    OneTask task(schema, kBatch);
    HintRecorder hints;

    detail::BatchFiller filler(detail::LazyReader(path, formats::ReaderOptions{}, schema), detail::SamplePipelines());
    ASSERT_EQ(filler.reader().opened(), nullptr);
    filler.read_ahead(task.view(), OneTask::kSlot);
    ASSERT_NE(filler.reader().opened(), nullptr);

    EXPECT_TRUE(hints.memory_hints.empty());
    ASSERT_EQ(hints.file_hints.size(), kBatch.size());
    detail::UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(file);
    std::vector<std::byte> got(kSampleBytes);
    for (std::size_t k = 0; k < kBatch.size(); ++k) {
      const HintRecorder::FileHint& h = hints.file_hints[k];
      EXPECT_EQ(h.length, kSampleBytes);
      EXPECT_EQ(hints.file_hints[k].fd, hints.file_hints[0].fd) << "one descriptor, the reader's";
      detail::pread_exact(file.get(), got.data(), got.size(), h.offset, path);
      EXPECT_EQ(got, test::expected_field(schema.fields[0], kBatch[k]))
          << "hint " << k << " is not sample " << kBatch[k];
    }
  }
}

// Small samples are not hinted: for them the lookups would cost more than the hint saves.
TEST(ReadAhead, SmallSamplesAreNotHinted) {
  test::TempDir dir;
  const std::string path = dir.path("small.lmdb");
  const Schema schema = test::small_schema(kSamples);
  test::write_lmdb(path, schema);
  OneTask task(schema, kBatch);
  HintRecorder hints;
  detail::BatchFiller filler(detail::LazyReader(path, formats::ReaderOptions{}, schema), detail::SamplePipelines());
  filler.read_ahead(task.view(), OneTask::kSlot);
  EXPECT_TRUE(hints.memory_hints.empty());
  EXPECT_TRUE(hints.file_hints.empty());
}

}  // namespace
}  // namespace stoker
