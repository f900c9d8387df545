// The consumer's waits as NVTX ranges (loader/nvtx.h), seen by a stand-in for Nsight Systems' tool
// (fake_nvtx_tool.cc) that NVTX loads from NVTX_INJECTION64_PATH: a process of its own, because NVTX
// looks for its tool once, at its first call.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

struct Counts {
  std::uint64_t started = 0, ended = 0, open = 0, unknown_ends = 0, other_names = 0;
};

Counts tool_counts() {
  const char* path = std::getenv("NVTX_INJECTION64_PATH");
  void* tool = path ? ::dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  if (tool == nullptr) return {};  // never loaded: no range was started
  using Read = void (*)(std::uint64_t*);
  std::uint64_t c[5] = {};
  reinterpret_cast<Read>(::dlsym(tool, "fake_nvtx_counts"))(c);
  ::dlclose(tool);
  return {c[0], c[1], c[2], c[3], c[4]};
}

// A Loader of 10 batches an epoch over an LMDB database made in `tmp`.
Options ten_batches(TempDir& tmp, std::size_t workers) {
  write_lmdb(tmp.path("d.lmdb"), small_schema(100));
  Options o;
  o.source = tmp.path("d.lmdb");
  o.batch_size = 10;
  o.num_workers = workers;
  return o;
}

TEST(Nvtx, EachWaitOfTheConsumerIsOneRangeNamedStokerWait) {
  if (std::getenv("NVTX_INJECTION64_PATH") == nullptr) GTEST_SKIP() << "run by ctest, with the stand-in tool";
  TempDir tmp;
  const Options o = ten_batches(tmp, 2);
  std::uint64_t calls = 0;
  {
    Loader loader(o);
    EXPECT_EQ(tool_counts().started, 0u) << "no range before the first wait";
    for (std::uint64_t epoch : {0, 1}) {
      auto it = loader.epoch(epoch);
      for (auto b = it.begin(); b != it.end(); ++b) ++calls;
      ++calls;  // the call that found the epoch's end
    }
  }
  const Counts c = tool_counts();
  EXPECT_EQ(calls, 22u);
  EXPECT_EQ(c.started, calls) << "one range per call for the next batch";
  EXPECT_EQ(c.ended, calls);
  EXPECT_EQ(c.open, 0u);
  EXPECT_EQ(c.unknown_ends, 0u);
  EXPECT_EQ(c.other_names, 0u) << "every range is named stoker.wait";
}

TEST(Nvtx, AWaitCutShortEndsItsRange) {
  if (std::getenv("NVTX_INJECTION64_PATH") == nullptr) GTEST_SKIP() << "run by ctest, with the stand-in tool";
  TempDir tmp;
  const Options o = ten_batches(tmp, 1);
  const Counts before = tool_counts();
  {
    Loader loader(o);
    {
      auto abandoned = loader.epoch(0);
      auto b = abandoned.begin();
      ++b;  // two batches taken, the rest of the epoch left
    }
    auto next = loader.epoch(1);  // a wait of the abandoned epoch would end here, had there been one
    for (auto b = next.begin(); b != next.end(); ++b) {
    }
    auto last = loader.epoch(2);
    (void)last.wait(std::chrono::milliseconds(1));  // asked for a batch, never taken it
  }                                                 // the Loader gone, the wait with it
  const Counts c = tool_counts();
  EXPECT_EQ(c.started - before.started, 2u + 11u + 1u);
  EXPECT_EQ(c.ended - before.ended, c.started - before.started);
  EXPECT_EQ(c.open, 0u);
  EXPECT_EQ(c.unknown_ends, 0u);
}

}  // namespace
}  // namespace stoker::test
