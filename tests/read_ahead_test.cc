// Read-ahead of samples that are not in the page cache, observed in the page cache itself: the
// file's pages are evicted (posix_fadvise DONTNEED on a clean file), the hint is given, and
// mincore(2) says which pages are now cached. mincore counts a page once its read has completed, so
// the check waits for the pages it expects (a bounded wait for an event, not a timing).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "loader/pipeline.h"
#include "loader/segment_layout.h"
#include "loader/worker.h"
#include "test_data.h"
#include "util/unique_fd.h"

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

// The page cache's view of one file.
class CachedPages {
 public:
  explicit CachedPages(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (!fd_) throw std::runtime_error("open " + path);
    size_ = static_cast<std::size_t>(::lseek(fd_.get(), 0, SEEK_END));
    map_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_.get(), 0);
    if (map_ == MAP_FAILED) throw std::runtime_error("mmap " + path);
  }
  ~CachedPages() { ::munmap(map_, size_); }

  // Drops the file's clean pages from the cache; false when the kernel kept some (e.g. tmpfs).
  bool evict() {
    ::fdatasync(fd_.get());
    ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_DONTNEED);
    return cached(0, size_) == 0;
  }
  // How many of the pages of [offset, offset + length) are in the page cache.
  std::size_t cached(std::size_t offset, std::size_t length) const {
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> in(size_ / page + 1);
    if (::mincore(map_, size_, in.data()) != 0) throw std::runtime_error("mincore");
    const std::size_t last = std::min((offset + length + page - 1) / page, size_ / page + 1);
    return static_cast<std::size_t>(std::count_if(in.begin() + static_cast<std::ptrdiff_t>(offset / page),
                                                  in.begin() + static_cast<std::ptrdiff_t>(last),
                                                  [](unsigned char c) { return c & 1; }));
  }
  // Whether every page of [offset, offset + length) is cached within 20 s.
  bool wait_until_cached(std::size_t offset, std::size_t length) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (cached(offset, length) < spanned(offset, length)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
  }
  // How many pages [offset, offset + length) touches.
  static std::size_t spanned(std::size_t offset, std::size_t length) {
    const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    return (offset + length + page - 1) / page - offset / page;
  }

 private:
  UniqueFd fd_;
  std::size_t size_ = 0;
  void* map_ = nullptr;
};

// Where each sample's bytes lie in the file, found by their contents (each sample's are unique).
std::vector<std::size_t> sample_offsets(const std::string& path, const Schema& schema) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::size_t> offsets;
  for (std::uint64_t i = 0; i < schema.num_samples; ++i) {
    const std::vector<std::byte> sample = test::expected_field(schema.fields[0], i);
    const char* begin = reinterpret_cast<const char*>(sample.data());
    const auto at =
        std::search(file.begin(), file.end(), std::boyer_moore_horspool_searcher(begin, begin + sample.size()));
    if (at == file.end()) throw std::runtime_error("sample not found in " + path);
    offsets.push_back(static_cast<std::size_t>(at - file.begin()));
  }
  return offsets;
}

// A worker's first batch is read ahead before anything has been read, the dataset not even opened
// (the first batches are the ones a cold start waits for), and only that batch is.
TEST(ReadAhead, AWorkersFirstBatchIsReadAheadBeforeItsFirstRead) {
  test::TempDir dir;
  const std::string path = dir.path("large.lmdb");
  const Schema schema = large_samples();
  test::write_lmdb(path, schema);
  const std::vector<std::size_t> offsets = sample_offsets(path, schema);
  ASSERT_EQ(offsets.size(), kSamples);

  CachedPages pages(path);
  if (!pages.evict()) GTEST_SKIP() << "the page cache keeps " << path << " (tmpfs?): cannot observe read-ahead";

  const detail::SegmentLayout layout(schema, 4, 1);
  std::vector<std::byte> segment(layout.segment_bytes(2));
  layout.initialize(segment.data(), 2);
  const detail::SegmentView view(segment.data(), layout);
  const std::vector<std::uint64_t> batch = {41, 7, 58, 23};
  std::copy(batch.begin(), batch.end(), view.slot_indices(1));
  view.slot_header(1).num_samples = static_cast<std::uint32_t>(batch.size());

  detail::BatchFiller filler(detail::LazyReader(path, formats::ReaderOptions{}, schema), detail::SamplePipelines());
  ASSERT_EQ(filler.reader().opened(), nullptr);
  filler.read_ahead(view, 1);
  EXPECT_NE(filler.reader().opened(), nullptr);

  for (std::uint64_t i : batch) {
    EXPECT_TRUE(pages.wait_until_cached(offsets[i], kSampleBytes)) << "sample " << i << " was not read ahead";
  }
  // Far from the batch's samples and from the file's first pages (which opening it reads).
  for (std::uint64_t i : {16, 31, 50}) {
    EXPECT_EQ(pages.cached(offsets[i], kSampleBytes), 0u) << "sample " << i << " is not in the batch";
  }
}

}  // namespace
}  // namespace stoker
