// Faults injected through the Env seam (base/env.h) and LMDB's (formats/lmdb/lmdb_calls.h): each gives a clear
// error or a recovery, and never a hang, a leaked process or /dev/shm entry, or a batch delivered twice.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "base/env.h"
#include "formats/lmdb/lmdb_calls.h"
#include "loader/shm/segment_layout.h"
#include "stoker/digest.h"
#include "stoker/init.h"
#include "stoker/loader.h"
#include "tests/support/hang_op.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// An Env (and LMDB calls) whose calls fail as the test says. Forked workers get a copy: the
// counters count the calls of the process they are in.
class FaultEnv : public detail::Env, public formats::LmdbCalls {
 public:
  std::function<int(int call)> fallocate_error;                 // 0: pass through
  std::function<int(off_t offset, std::size_t n)> pread_error;  // 0: pass through; -1: end of file
  std::function<int(int call)> fork_error;                      // 0: pass through
  std::function<int(const MDB_val& key)> mdb_error;             // 0: pass through
  std::function<std::size_t(const MDB_val& key)> value_size;    // a size to report; 0: the value's
  std::function<void(std::byte* slot)> corrupt_slot;            // a worker that went wrong
  bool kill_ignored = false;                                    // SIGKILL does not end a worker (asleep in the kernel)

  int posix_fallocate(int fd, off_t offset, off_t len) override {
    if (int e = fallocate_error ? fallocate_error(++fallocates_) : 0) return e;
    return Env::posix_fallocate(fd, offset, len);
  }
  ssize_t pread(int fd, void* buf, std::size_t n, off_t offset) override {
    if (int e = pread_error ? pread_error(offset, n) : 0) {
      if (e < 0) return 0;
      errno = e;
      return -1;
    }
    return Env::pread(fd, buf, n, offset);
  }
  pid_t fork() override {
    if (int e = fork_error ? fork_error(++forks_) : 0) {
      errno = e;
      return -1;
    }
    return Env::fork();
  }
  int kill(pid_t pid, int sig) override { return kill_ignored ? 0 : Env::kill(pid, sig); }
  void filled_slot(std::byte* slot, std::size_t) override {
    if (corrupt_slot) corrupt_slot(slot);
  }
  int mdb_get(MDB_txn* txn, MDB_dbi dbi, MDB_val* key, MDB_val* value) override {
    if (int e = mdb_error ? mdb_error(*key) : 0) return e;
    return resized(*key, value, LmdbCalls::mdb_get(txn, dbi, key, value));
  }
  int mdb_cursor_get(MDB_cursor* cursor, MDB_val* key, MDB_val* value, MDB_cursor_op op) override {
    return resized(*key, value, LmdbCalls::mdb_cursor_get(cursor, key, value, op));
  }

 private:
  int resized(const MDB_val& key, MDB_val* value, int rc) const {
    if (rc == MDB_SUCCESS && value_size) {
      if (std::size_t n = value_size(key)) value->mv_size = n;
    }
    return rc;
  }
  int fallocates_ = 0, forks_ = 0;
};

class Faults : public ::testing::Test {
 protected:
  void SetUp() override {
    ::alarm(60);  // a hang fails the test
    schema_ = small_schema(600);
    write_lmdb(tmp_.path("d.lmdb"), schema_);
    write_hdf5(tmp_.path("d.h5"), schema_, {formats::Hdf5WriteOptions::Layout::contiguous, 0, 0});
    detail::Env::install(&env_);
    formats::LmdbCalls::install(&env_);
  }
  void TearDown() override {
    detail::Env::install(nullptr);
    formats::LmdbCalls::install(nullptr);
    EXPECT_TRUE(descendants().empty()) << "a process outlived its loader";
    EXPECT_TRUE(shm_entries_of(::getpid()).empty()) << "a /dev/shm entry outlived its loader";
    ::alarm(0);
  }
  Options options(const std::string& file, std::size_t workers) {
    Options o;
    o.source = tmp_.path(file);
    o.num_workers = workers;
    o.batch_size = 20;
    return o;
  }
  // Every batch until the error, checking that no sample comes twice; returns the error's code and
  // text (as test::caught does: internal and "no error" when the epoch ends without one).
  Caught run_until_error(Loader& loader, std::uint64_t* delivered = nullptr) {
    std::set<std::uint64_t> seen;
    const Caught error = caught([&] {
      for (Batch& b : loader.epoch(0)) {
        for (std::uint64_t i : b.indices()) EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice";
      }
    });
    if (delivered) *delivered = seen.size();
    return error;
  }
  FaultEnv env_;
  TempDir tmp_;
  Schema schema_;
};

// Faults inside worker processes or the fork server: they inherit the test's Env only when forked
// from it. With stoker::init they start from a fresh exec, so these tests run on the fork-only
// path (the ForkOnlyPath.WorkerProcessTests entry of ctest).
#define SKIP_UNLESS_FORKED_WORKERS()                                             \
  if (clean_workers())                                                           \
  GTEST_SKIP() << "injects faults into worker processes: runs on the fork-only " \
                  "path (ctest's ForkOnlyPath.WorkerProcessTests)"

TEST_F(Faults, SharedMemoryThatCannotBeReservedIsRefusedClearly) {
  env_.fallocate_error = [](int) { return ENOSPC; };
  expect_error(ErrorCode::shm, [&] { Loader l(options("d.lmdb", 2)); }, {"but reserving it failed with ENOSPC"});
}

TEST_F(Faults, AnOtherFallocateErrorIsReportedWithItsName) {
  env_.fallocate_error = [](int) { return EIO; };
  expect_error(ErrorCode::io, [&] { Loader l(options("d.lmdb", 2)); }, {"reserving", "(EIO)"});
}

TEST_F(Faults, AReadErrorFailsItsBatchNamingDatasetAndSamples) {
  // The direct path reads 'image' (u8[3,4,5], 60 bytes a sample) as one pread per batch: fail
  // batch 6's (samples 120..139), found from batch 0's offset.
  std::atomic<off_t> image_start{-1};
  env_.pread_error = [&](off_t offset, std::size_t n) {
    if (n == 60 * 20 && image_start < 0) image_start = offset;  // batch 0's read, in this process
    return n == 60 * 20 && image_start >= 0 && offset == image_start + 60 * 120 ? EIO : 0;
  };
  Loader loader(options("d.h5", 0));
  std::uint64_t delivered = 0;
  const Caught e = run_until_error(loader, &delivered);
  EXPECT_EQ(e.code, ErrorCode::io) << e.message;
  EXPECT_THAT(e.message, HasSubstr("batch 6 of epoch 0"));
  EXPECT_THAT(e.message, HasSubstr("dataset 'image': samples 120..139"));
  EXPECT_THAT(e.message, HasSubstr("Input/output error (EIO)"));
  EXPECT_EQ(delivered, 120u) << "the batches before it were delivered, each once";
}

TEST_F(Faults, AShortReadIsAnUnexpectedEndOfFile) {
  SKIP_UNLESS_FORKED_WORKERS();
  env_.pread_error = [](off_t, std::size_t n) { return n == 60 * 20 ? -1 : 0; };
  Loader loader(options("d.h5", 2));
  const Caught e = run_until_error(loader);
  EXPECT_EQ(e.code, ErrorCode::dataset) << e.message;
  EXPECT_THAT(e.message, HasSubstr("dataset 'image': samples 0..19"));
  EXPECT_THAT(e.message, HasSubstr("unexpected end of file"));
}

TEST_F(Faults, AnLmdbErrorNamesTheSample) {
  SKIP_UNLESS_FORKED_WORKERS();
  env_.mdb_error = [](const MDB_val& key) {
    const auto* k = static_cast<const unsigned char*>(key.mv_data);
    return key.mv_size == 8 && k[7] == 77 ? MDB_CORRUPTED : 0;
  };
  Loader loader(options("d.lmdb", 2));
  std::uint64_t delivered = 0;
  const Caught e = run_until_error(loader, &delivered);
  EXPECT_EQ(e.code, ErrorCode::dataset) << e.message;
  EXPECT_THAT(e.message, HasSubstr("reading sample 77"));
  EXPECT_THAT(e.message, HasSubstr("MDB_CORRUPTED"));
  EXPECT_EQ(delivered, 60u);
}

// A value larger than a sample may be is refused naming its key: when the database is opened,
// where its size would otherwise size the slots, and when read, should one have grown since.
TEST_F(Faults, AnLmdbValueLargerThanASampleMayBeIsNamedWithItsKey) {
  std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>> records;
  for (char i = '0'; i <= '9'; ++i) records.push_back({{std::byte(i)}, std::vector<std::byte>(100, std::byte(i))});
  test::write_plain_lmdb(tmp_.path("plain.lmdb"), records);
  const auto seven_is_huge = [](const MDB_val& key) -> std::size_t {
    return key.mv_size == 1 && *static_cast<const char*>(key.mv_data) == '7' ? kMaxSampleBytes + 1 : 0;
  };
  const std::string why =
      "plain.lmdb: sample 7 (key b'7') holds 1073741825 bytes, more than a sample may "
      "(1073741824 bytes, kMaxSampleBytes)";
  Options o = options("plain.lmdb", 0);
  o.batch_size = 2;
  env_.value_size = seven_is_huge;
  expect_error(ErrorCode::dataset, [&] { Loader l(o); }, {why});

  env_.value_size = nullptr;
  Loader loader(o);
  env_.value_size = seven_is_huge;
  std::uint64_t delivered = 0;
  const Caught e = run_until_error(loader, &delivered);
  EXPECT_EQ(e.code, ErrorCode::dataset) << e.message;
  EXPECT_THAT(e.message, HasSubstr(why));
  EXPECT_EQ(delivered, 6u);
}

TEST_F(Faults, TheLoaderStaysUsableAfterAFailedBatch) {
  // In this process (no workers), so that the fault can be cleared: workers keep a copy of the Env.
  env_.mdb_error = [](const MDB_val& key) {
    const auto* k = static_cast<const unsigned char*>(key.mv_data);
    return key.mv_size == 8 && k[7] == 77 ? EIO : 0;
  };
  Loader loader(options("d.lmdb", 0));
  std::uint64_t delivered = 0;
  const Caught e = run_until_error(loader, &delivered);
  EXPECT_EQ(e.code, ErrorCode::io) << e.message;
  EXPECT_THAT(e.message, HasSubstr("reading sample 77: Input/output error"));
  env_.mdb_error = nullptr;
  EXPECT_EQ(run_until_error(loader, &delivered).message, "no error");
  EXPECT_EQ(delivered, 600u) << "a new epoch delivers every sample once";
}

TEST_F(Faults, ADatasetReplacedAfterTheLoaderOpenedItIsAnError) {
  Loader loader(options("d.lmdb", 2));  // workers open the dataset on their first batch
  write_lmdb(tmp_.path("other.lmdb"), small_schema(500));
  ASSERT_EQ(0, std::rename(tmp_.path("other.lmdb").c_str(), tmp_.path("d.lmdb").c_str()));
  const Caught e = run_until_error(loader);
  EXPECT_EQ(e.code, ErrorCode::dataset) << e.message;
  EXPECT_THAT(e.message, HasSubstr("the dataset changed after the loader opened it (was 600 samples of"));
  EXPECT_THAT(e.message, HasSubstr("now 500 samples of"));
}

// The same schema, other contents (a new version copied over the old): samples of the two are
// never mixed; a worker that opens the new file refuses it, naming what differs.
TEST_F(Faults, ADatasetReplacedWithTheSameSchemaIsRefusedNotMixedIn) {
  Loader loader(options("d.lmdb", 2));  // workers open the dataset on their first batch
  write_lmdb(tmp_.path("other.lmdb"), schema_);
  ASSERT_EQ(0, std::rename(tmp_.path("other.lmdb").c_str(), tmp_.path("d.lmdb").c_str()));
  const Caught e = run_until_error(loader);
  EXPECT_EQ(e.code, ErrorCode::dataset) << e.message;
  EXPECT_THAT(e.message, HasSubstr("d.lmdb: the dataset was replaced or changed since the loader opened it (it is "
                                   "another file (device and inode)"));
}

// A database another program writes in place while the loader reads it: the write is an error at
// the next batch read after it, naming the file, never a mix of two versions.
TEST_F(Faults, AnLmdbWrittenWhileTheLoaderReadsItIsAnErrorNotAMix) {
  Options o = options("d.lmdb", 2);
  o.batch_size = 5;  // 120 batches: far more than the ring holds ahead
  Loader loader(o);
  std::size_t n = 0;
  std::string error = "no error";
  try {
    for (Batch& b : loader.epoch(0)) {
      (void)b;
      if (++n == 1) write_lmdb_note_in_place(tmp_.path("d.lmdb"));
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::dataset) << e.what();
    error = e.what();
  }
  // A worker that had the database open meets the new transaction at its next read; one that opens
  // it after the write (under load, the second worker's first batch may come that late), the new
  // identity (its modification time at least).
  EXPECT_THAT(error, AnyOf(HasSubstr("d.lmdb: the database was written while it was read (its last transaction was"),
                           HasSubstr("d.lmdb: the dataset was replaced or changed since the loader opened it (")));
  EXPECT_LT(n, 120u);
}

// A stuck worker that SIGKILL does not end (asleep in the kernel, on a hung NFS server: played by a
// fork server whose kill does nothing) may still write its slots: after the grace the loader stops,
// saying so, instead of giving them to another worker or waiting for its end forever.
TEST_F(Faults, AKilledWorkerThatDoesNotEndStopsTheLoaderInsteadOfReusingItsSlots) {
  SKIP_UNLESS_FORKED_WORKERS();
  env_.kill_ignored = true;
  ::setenv(kHangMarkerEnv, tmp_.path("hung").c_str(), 1);
  Options o = options("d.lmdb", 1);
  o.timeout = std::chrono::seconds(2);  // no false "stuck" on a loaded machine: its kill would not work
  o.pipeline = "label=hang_once(35)";   // batch 1
  Loader loader(o);
  std::uint64_t delivered = 0;
  const Caught e = run_until_error(loader, &delivered);
  ::unsetenv(kHangMarkerEnv);
  EXPECT_EQ(e.code, ErrorCode::worker_stuck) << e.message;
  EXPECT_THAT(e.message, HasSubstr("made no progress for"));
  EXPECT_THAT(e.message, HasSubstr("and was killed, but 10 s later it has not ended"));
  EXPECT_THAT(e.message, HasSubstr("so they are not given to another worker and the loader cannot continue"));
  EXPECT_EQ(delivered, 20u) << "batch 0, and nothing of the slots the worker may still write";
}

TEST_F(Faults, AWorkerThatCannotBeStartedIsAnErrorAtConstruction) {
  SKIP_UNLESS_FORKED_WORKERS();
  // Forks are counted from the probe's (1) and the fork server's (2), then in the fork server, which
  // counts on from its copy: worker 0 (3), worker 1 (4).
  env_.fork_error = [](int call) { return call == 4 ? EAGAIN : 0; };
  expect_error(ErrorCode::io, [&] { Loader l(options("d.lmdb", 3)); },
               {"could not start worker 1: fork: Resource temporarily unavailable (EAGAIN)", "the limit on processes"});
}

// Every child the loader starts is forked through Env: the probe's and the fork server's forks
// fail as the workers' do, each error naming the process that could not be started.
TEST_F(Faults, AProbeOrForkServerThatCannotBeStartedIsAnErrorNamingIt) {
  SKIP_UNLESS_FORKED_WORKERS();
  env_.fork_error = [](int call) { return call == 1 ? EAGAIN : 0; };
  expect_error(ErrorCode::io, [&] { Loader l(options("d.lmdb", 2)); },
               {"fork of the probe that reads the dataset's metadata", "EAGAIN"});
  env_.fork_error = [](int call) { return call == 3 ? EAGAIN : 0; };  // counted on: the probe's is 2
  expect_error(ErrorCode::io, [&] { Loader l(options("d.lmdb", 2)); }, {"fork of the stoker fork server", "EAGAIN"});
}

TEST_F(Faults, AReplacementThatCannotBeStartedEndsTheEpochWithAnError) {
  SKIP_UNLESS_FORKED_WORKERS();
  env_.fork_error = [](int call) { return call == 5 ? EAGAIN : 0; };  // probe, server, two workers, the respawn
  Options o = options("d.lmdb", 2);
  o.batch_size = 5;
  Loader loader(o);
  std::set<std::uint64_t> seen;
  std::string error = "no error";
  try {
    std::size_t n = 0;
    for (Batch& b : loader.epoch(0)) {
      for (std::uint64_t i : b.indices()) EXPECT_TRUE(seen.insert(i).second);
      if (++n == 3) ::kill(loader.worker_pids().at(1), SIGKILL);
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io) << e.what();
    error = e.what();
  }
  EXPECT_THAT(error, HasSubstr("could not start worker 1: fork: Resource temporarily unavailable (EAGAIN)"));
}

}  // namespace
}  // namespace stoker::test

namespace stoker::test {
namespace {

// A worker whose slot comes back malformed (a corrupted process: here, batch 4's header claims a
// billion samples, once) is taken for dead: nothing it wrote is read, it is killed and replaced, and
// its batches come again, exactly.
TEST_F(Faults, AWorkerThatWritesAMalformedSlotIsReplacedAndNothingOfItIsRead) {
  SKIP_UNLESS_FORKED_WORKERS();
  Options o = options("d.lmdb", 2);
  std::vector<std::string> warnings;
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  ContentDigest want;
  for (std::uint64_t i = 0; i < schema_.num_samples; ++i) want.add(i, expected_sample(schema_, i));
  const std::string marker = tmp_.path("corrupted");
  env_.corrupt_slot = [&](std::byte* slot) {
    detail::SlotHeader h;
    std::memcpy(&h, slot, sizeof h);
    if (h.batch_index != 4 || ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644) < 0) return;
    h.num_samples = 1'000'000'000;
    std::memcpy(slot, &h, sizeof h);
  };
  Loader loader(o);
  ContentDigest got;
  for (Batch& b : loader.epoch(0)) got.add(b);
  EXPECT_EQ(got.value(), want.value());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("reported a batch in slot"));
  EXPECT_THAT(warnings[0], HasSubstr("(batch 4 of epoch 0), and its header says task 4, epoch 0, batch 4 of "
                                     "1000000000 samples; the consumer asked for batch 4 of epoch 0, 20 samples and "
                                     "was killed; replaced by pid"));
  EXPECT_EQ(loader.stats().respawns, 1u);
}

}  // namespace
}  // namespace stoker::test
