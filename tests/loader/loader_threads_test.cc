// A Loader used from several threads at once (stoker/loader.h, "Thread-safety"): threads that take
// batches of one epoch get each batch once, in order; stats(), state() and worker_pids() answer
// while another thread waits for a batch that cannot come (its workers stopped); destroying the
// Loader ends a wait of another thread. TSan runs these too (tests/sanitizers.sh).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <vector>

#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kSamples = 203;
constexpr std::size_t kBatch = 4;

class LoaderThreads : public ::testing::Test {
 protected:
  void SetUp() override { write_lmdb(tmp_.path("d.lmdb"), small_schema(kSamples)); }
  Options options(std::size_t workers) const {
    Options o;
    o.source = tmp_.path("d.lmdb");
    o.batch_size = kBatch;
    o.num_workers = workers;
    o.shutdown_grace = std::chrono::milliseconds(100);
    return o;
  }
  TempDir tmp_;
};

// Three threads take the batches of each epoch: every batch reaches one of them, each thread's
// batches come in order, and their contents are the samples of that batch.
TEST_F(LoaderThreads, ThreadsTakingBatchesOfOneEpochGetEachOnceInOrder) {
  const Schema schema = small_schema(kSamples);
  for (const bool staged : {false, true}) {
    for (const std::size_t workers : {0u, 2u}) {
      Options o = options(workers);
      o.shuffle = true;
      o.held_batches = 3;  // each thread holds one batch while it checks it
      if (staged) o.device = Device::emulated();
      Loader loader(o);
      for (std::uint64_t e = 0; e < 3; ++e) {
        Epoch epoch = loader.epoch(e);
        std::vector<std::vector<std::uint64_t>> taken(3);  // per thread: the batch indices it took
        std::vector<std::thread> threads;
        for (auto& mine : taken) {
          threads.emplace_back([&epoch, &mine, &schema] {
            while (std::optional<Batch> b = epoch.next()) {
              mine.push_back(b->index());
              std::vector<std::byte> want;  // the labels of its samples
              for (const std::uint64_t i : b->indices()) {
                const std::vector<std::byte> label = expected_field(schema.fields[1], i);
                want.insert(want.end(), label.begin(), label.end());
              }
              std::vector<std::byte> got(want.size());
              b->copy_field_to_host(1, got.data());  // a staged batch's field is on the device
              EXPECT_EQ(got, want) << "batch " << b->index();
            }
          });
        }
        for (auto& t : threads) t.join();
        std::vector<std::uint64_t> all;
        for (const auto& mine : taken) {
          EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
          all.insert(all.end(), mine.begin(), mine.end());
        }
        std::sort(all.begin(), all.end());
        std::vector<std::uint64_t> want(loader.batches_per_epoch());
        std::iota(want.begin(), want.end(), 0);
        EXPECT_EQ(all, want) << "staged " << staged << " workers " << workers << " epoch " << e;
        EXPECT_TRUE(loader.state().epoch_finished);
      }
    }
  }
}

// With its workers stopped, one thread waits in next() for a batch that cannot come; meanwhile the
// others' calls answer (a call that waited for that batch would hang this test).
TEST_F(LoaderThreads, StatsStateAndWorkerPidsAnswerWhileAnotherThreadWaitsForABatch) {
  Loader loader(options(2));
  Epoch epoch = loader.epoch(0);
  ASSERT_TRUE(epoch.next());
  const std::vector<int> pids = loader.worker_pids();
  for (const int pid : pids) ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  std::uint64_t got = 1;
  const double waited_before = loader.stats().wait_seconds;
  std::thread waiter([&] {
    while (epoch.next()) ++got;
  });
  // The waiter has taken what was prefetched and waits for a batch that cannot come: more than a
  // slice of its wait is counted.
  while (loader.stats().wait_seconds < waited_before + 0.15) std::this_thread::yield();
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(loader.worker_pids(), pids);
    EXPECT_EQ(loader.stats().workers, 2u);
    EXPECT_FALSE(loader.state().epoch_finished);
  }
  for (const int pid : pids) ASSERT_EQ(::kill(pid, SIGCONT), 0);
  waiter.join();
  EXPECT_EQ(got, loader.batches_per_epoch());
  EXPECT_TRUE(loader.state().epoch_finished);
  EXPECT_EQ(loader.stats().batches, loader.batches_per_epoch());
}

// The Loader destroyed while another thread waits in next(): that call ends with the error of an
// Epoch whose Loader is gone, and the workers are gone once it has returned.
TEST_F(LoaderThreads, DestroyingTheLoaderEndsAWaitOfAnotherThread) {
  for (const bool staged : {false, true}) {
    Options o = options(1);
    if (staged) o.device = Device::emulated();
    std::optional<Loader> loader(std::in_place, o);
    Epoch epoch = loader->epoch(0);
    ASSERT_TRUE(epoch.next());
    for (const int pid : loader->worker_pids()) ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    Caught waited{};
    const double waited_before = loader->stats().wait_seconds;
    std::thread waiter([&] {
      waited = caught([&] {
        while (epoch.next()) {
        }
      });
    });
    // The waiter waits for a batch that cannot come before the Loader goes: a host loader counts
    // that wait as it goes; a staged one only once it ends, so there the waiter is given time.
    if (staged) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    } else {
      while (loader->stats().wait_seconds < waited_before + 0.15) std::this_thread::yield();
    }
    loader.reset();
    waiter.join();
    EXPECT_EQ(waited.code, ErrorCode::invalid_option) << waited.message;
    EXPECT_THAT(waited.message, HasSubstr("this epoch's Loader was destroyed")) << "staged " << staged;
    EXPECT_TRUE(descendants().empty());
  }
}

}  // namespace
}  // namespace stoker::test
