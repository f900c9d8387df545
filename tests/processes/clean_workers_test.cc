// Workers from a clean process image (stoker::init): loaders built and destroyed while another
// thread is inside HDF5.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "stoker/digest.h"
#include "stoker/init.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

TEST(CleanWorkers, FiftyLoadersComeAndGoBesideAThreadInHdf5) {
  if (!clean_workers()) {
    GTEST_SKIP() << "needs stoker::init(): on the fork-only path a worker may inherit HDF5 half-way through "
                    "another thread's call (docs/faults.md)";
  }
  ::alarm(110);  // a hang fails the test
  TempDir tmp;
  const Schema schema = small_schema(400);
  write_hdf5(tmp.path("a.h5"), schema, {formats::Hdf5WriteOptions::Layout::chunked, 16, 2});
  write_hdf5(tmp.path("b.h5"), schema, {formats::Hdf5WriteOptions::Layout::chunked, 32, 0});
  ContentDigest want;
  for (std::uint64_t i = 0; i < schema.num_samples; ++i) want.add(i, expected_sample(schema, i));

  // A thread that is inside HDF5 nearly all the time: a loader without workers reads on it.
  std::atomic<bool> stop{false};
  std::atomic<int> side_epochs{0};
  std::string side_error;
  std::thread side([&] {
    try {
      Options o;
      o.source = tmp.path("a.h5");
      o.batch_size = 7;
      o.shuffle = true;
      Loader l(o);
      for (std::uint64_t e = 0; !stop; ++e) {
        ContentDigest d;
        for (Batch& b : l.epoch(e)) d.add(b);
        if (d.value() != want.value()) throw Error("the side thread's epoch differs");
        ++side_epochs;
      }
    } catch (const std::exception& e) {
      side_error = e.what();
    }
  });
  for (int i = 0; i < 50; ++i) {
    Options o;
    o.source = tmp.path(i % 2 ? "a.h5" : "b.h5");
    o.batch_size = 25;
    o.num_workers = 2;
    o.shuffle = true;
    o.seed = static_cast<std::uint64_t>(i);
    Loader l(o);
    ContentDigest d;
    for (Batch& b : l.epoch(0)) d.add(b);
    ASSERT_EQ(d.value(), want.value()) << "loader " << i;
  }
  stop = true;
  side.join();
  EXPECT_EQ(side_error, "");
  EXPECT_GT(side_epochs.load(), 0);
  EXPECT_TRUE(descendants().empty());
  ::alarm(0);
}

}  // namespace
}  // namespace stoker::test
