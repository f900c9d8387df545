// The memory the training process takes for a batch too large for its slot, seen allocation by
// allocation: this program replaces operator new and counts every large allocation the process
// makes while it is asked to. A program of its own, so that the counting sees all of this process
// and nothing of other tests. Processes it forks (the fork server, workers, the child that reads
// the batch) count in their own memory, which is not looked at.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <new>
#include <vector>

#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace {

// Allocations of at least this many bytes are counted (the batch's bytes are megabytes; the
// loader's own bookkeeping is far smaller).
constexpr std::size_t kLarge = 256 << 10;
std::atomic<bool> g_counting{false};
std::atomic<std::size_t> g_count{0};
std::array<std::atomic<std::size_t>, 64> g_sizes{};

void* allocate(std::size_t n) {
  if (n >= kLarge && g_counting.load(std::memory_order_relaxed)) {
    const std::size_t k = g_count.fetch_add(1, std::memory_order_relaxed);
    if (k < g_sizes.size()) g_sizes[k].store(n, std::memory_order_relaxed);
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace stoker {
namespace {

using Bytes = std::vector<std::byte>;

// The sizes of the large allocations made while `f` ran.
std::vector<std::size_t> large_allocations(const std::function<void()>& f) {
  g_count = 0;
  g_counting = true;
  try {
    f();
  } catch (...) {
    g_counting = false;
    throw;
  }
  g_counting = false;
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < std::min(g_count.load(), g_sizes.size()); ++k) out.push_back(g_sizes[k].load());
  return out;
}

// 31 samples, batches of 4: the slots are sized from samples 0, 2, 4, ... 30, all small; samples
// 5 and 7, in batch 1, are 3 MiB.
constexpr std::uint64_t kSamples = 31;
std::uint64_t sample_size(std::uint64_t i) { return i == 5 || i == 7 ? (3u << 20) + i : 100 + i; }

Options options(const std::string& path, std::size_t workers) {
  Options o;
  o.source = path;
  o.batch_size = 4;
  o.num_workers = workers;
  o.on_warning = [](std::string_view) {};
  return o;
}

TEST(OverflowMemory, TheTrainerTakesOneBufferOfExactlyTheBatchsBytes) {
  test::TempDir tmp;
  const std::string p = tmp.path("big.h5");
  std::vector<Bytes> samples;
  for (std::uint64_t i = 0; i < kSamples; ++i) {
    Bytes b(sample_size(i));
    for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((i * 5 + k * 3) & 0xff);
    samples.push_back(std::move(b));
  }
  {
    test::H5Builder f(p);
    f.vlen("blob", samples);
  }
  Loader loader(options(p, 2));
  std::uint64_t seen = 0;
  const std::vector<std::size_t> large = large_allocations([&] {
    for (Batch& b : loader.epoch(0)) {
      for (std::size_t k = 0; k < b.size(); ++k) {
        const auto s = b["blob"].sample(k);
        const Bytes& want = samples[b.indices()[k]];  // compared in place: a copy would be counted
        EXPECT_TRUE(std::equal(s.begin(), s.end(), want.begin(), want.end())) << "sample " << b.indices()[k];
        ++seen;
      }
    }
  });
  EXPECT_EQ(seen, kSamples);
  EXPECT_EQ(loader.stats().overflow_batches, 1u);
  // Batch 1 (samples 4 to 7), once, in memory of its size (rounded up to where any dtype may
  // start): not a buffer that doubles as the bytes arrive, and not one zero-filled and then copied.
  constexpr std::size_t kAlign = alignof(std::max_align_t);
  const std::size_t bytes = sample_size(4) + sample_size(5) + sample_size(6) + sample_size(7);
  EXPECT_THAT(large, ::testing::ElementsAre((bytes + kAlign - 1) / kAlign * kAlign));
}

TEST(OverflowMemory, ABatchOverItsBoundIsRefusedBeforeAnyMemoryIsTakenForIt) {
  test::TempDir tmp;
  const std::string p = tmp.path("hollow.h5");
  {
    // Samples 5 and 7 claim 3 MiB each, and the file holds none of it.
    test::H5Builder f(p);
    f.group("blob");
    for (std::uint64_t i = 0; i < kSamples; ++i) {
      if (i == 5 || i == 7) {
        f.unwritten("blob/" + std::to_string(i), sample_size(i));
      } else {
        const Bytes b(sample_size(i), std::byte{1});
        f.array("blob/" + std::to_string(i), H5T_NATIVE_UINT8, {b.size()}, b.data());
      }
    }
  }
  Loader loader(options(p, 2));
  const std::vector<std::size_t> large = large_allocations([&] {
    test::expect_error(ErrorCode::dataset,
                       [&] {
                         for (Batch& b : loader.epoch(0)) (void)b;
                       },
                       {"batch 1 of epoch 0, too large for its slot and read again: its bytes fields hold",
                        "its largest sample 7 of 3.0 MiB", "the dataset's size on disk"});
  });
  EXPECT_THAT(large, ::testing::IsEmpty());
}

}  // namespace
}  // namespace stoker
