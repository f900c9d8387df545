#include "stoker/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <lmdb.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <thread>

#include "base/posix_error.h"
#include "formats/lmdb/lmdb_env.h"
#include "loader/loader_design.h"
#include "loader/plan/shuffle.h"
#include "loader/shm/segment_layout.h"
#include "stoker/digest.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Checks every field of `b` against the generator and returns its indices.
std::vector<std::uint64_t> check_batch(const Batch& b, const Schema& schema) {
  EXPECT_EQ(b.fields().size(), schema.fields.size());
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    const FieldView& v = b.fields()[f];
    const Field& field = schema.fields[f];
    EXPECT_EQ(v.name, field.name);
    EXPECT_EQ(v.dtype, field.dtype);
    std::vector<std::int64_t> shape{static_cast<std::int64_t>(b.size())};
    shape.insert(shape.end(), field.shape.begin(), field.shape.end());
    EXPECT_EQ(v.shape, shape);
    EXPECT_EQ(v.bytes, b.size() * field.bytes_per_sample());
    for (std::size_t k = 0; k < b.size(); ++k) {
      auto want = expected_field(field, b.indices()[k]);
      EXPECT_EQ(0, std::memcmp(v.data + k * want.size(), want.data(), want.size()))
          << field.name << " sample " << b.indices()[k] << " batch " << b.index();
    }
  }
  return {b.indices().begin(), b.indices().end()};
}

// All indices of one epoch, in delivery order, with every batch checked.
std::vector<std::uint64_t> run_epoch(Loader& loader, std::uint64_t epoch, const Schema& schema) {
  std::vector<std::uint64_t> order;
  std::uint64_t expected_index = 0;
  for (Batch& b : loader.epoch(epoch)) {
    EXPECT_EQ(b.index(), expected_index++);
    EXPECT_EQ(b.epoch(), epoch);
    EXPECT_LE(b.size(), loader.options().batch_size);
    auto idx = check_batch(b, schema);
    order.insert(order.end(), idx.begin(), idx.end());
  }
  EXPECT_EQ(expected_index, loader.batches_per_epoch());
  return order;
}

class LoaderData : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = small_schema(100);
    write_hdf5(tmp_.path("d.h5"), schema_, {formats::Hdf5WriteOptions::Layout::chunked, 16, 0});
    write_hdf5(tmp_.path("gz.h5"), schema_, {formats::Hdf5WriteOptions::Layout::chunked, 16, 3});
    write_hdf5(tmp_.path("contig.h5"), schema_, {formats::Hdf5WriteOptions::Layout::contiguous, 0, 0});
    write_lmdb(tmp_.path("d.lmdb"), schema_);
  }
  Options options(const std::string& file, std::size_t workers, std::size_t batch) {
    Options o;
    o.source = tmp_.path(file);
    o.num_workers = workers;
    o.batch_size = batch;
    return o;
  }
  TempDir tmp_;
  Schema schema_;
};

TEST_F(LoaderData, SequentialEpochHasExactContentsForEveryFormatAndWorkerCount) {
  for (const char* file : {"d.h5", "gz.h5", "contig.h5", "d.lmdb"}) {
    for (std::size_t workers : {0, 1, 2, 3}) {
      for (std::size_t batch : {7, 10}) {
        SCOPED_TRACE(testing::Message() << file << " workers " << workers << " batch " << batch);
        Loader loader(options(file, workers, batch));
        EXPECT_EQ(loader.batches_per_epoch(), (100 + batch - 1) / batch);
        auto order = run_epoch(loader, 0, schema_);
        std::vector<std::uint64_t> seq(100);
        std::iota(seq.begin(), seq.end(), 0);
        EXPECT_EQ(order, seq);
      }
    }
  }
}

TEST_F(LoaderData, ShuffledOrderIsTheSameForAnyNumberOfWorkers) {
  std::vector<std::uint64_t> reference;
  for (const char* file : {"d.h5", "d.lmdb"}) {
    for (std::size_t workers : {0, 1, 2, 3}) {
      for (bool drop_last : {false, true}) {
        SCOPED_TRACE(testing::Message() << file << " workers " << workers << " drop_last " << drop_last);
        Options o = options(file, workers, 8);
        o.shuffle = true;
        o.seed = 1234;
        o.drop_last = drop_last;
        Loader loader(o);
        for (std::uint64_t epoch : {0, 1}) {
          auto order = run_epoch(loader, epoch, schema_);
          auto perm = detail::permutation(100, 1234, epoch);
          if (drop_last) perm.resize(96);
          EXPECT_EQ(order, perm);
          std::set<std::uint64_t> unique(order.begin(), order.end());
          EXPECT_EQ(unique.size(), order.size());
        }
      }
    }
  }
}

TEST_F(LoaderData, QuasiRandomIsEverySampleOnceAndTheSameForAnyNumberOfWorkers) {
  for (const char* file : {"gz.h5", "d.lmdb"}) {
    std::vector<std::uint64_t> first;
    for (std::size_t workers : {0u, 1u, 3u}) {
      Options o = options(file, workers, 7);
      o.order = Order::quasi_random;
      o.seed = 5;
      Loader loader(o);
      // Chunk rows for chunked HDF5; about 64 KiB of records for LMDB.
      const std::uint64_t group = std::string(file) == "gz.h5" ? 16 : 65536 / schema_.bytes_per_sample();
      EXPECT_EQ(loader.state().order, "quasi_random(group=" + std::to_string(group) + ",window=4)");
      std::vector<std::uint64_t> order = run_epoch(loader, 3, schema_);
      if (first.empty()) {
        first = order;
        std::vector<std::uint64_t> sorted = order, all(schema_.num_samples);
        std::sort(sorted.begin(), sorted.end());
        std::iota(all.begin(), all.end(), 0);
        EXPECT_EQ(sorted, all) << file;
        std::vector<std::uint64_t> seq(all);
        EXPECT_NE(order, seq) << file << ": not shuffled";
      } else {
        EXPECT_EQ(order, first) << file << " with " << workers << " workers";
      }
    }
  }
}

TEST_F(LoaderData, AutoWorkersAndPrefetchDeliverTheSameOrderAndSayWhatTheyChose) {
  Options fixed = options("d.lmdb", 2, 3);
  fixed.shuffle = true;
  Loader reference(fixed);
  const std::vector<std::uint64_t> want = run_epoch(reference, 1, schema_);
  Options o = fixed;
  o.num_workers = kAuto;
  o.prefetch = kAuto;
  Loader loader(o);
  const unsigned cores = std::max(1u, std::min(16u, detail::usable_cpus()));
  EXPECT_EQ(loader.worker_pids().size(), cores) << "every worker the tuner may use is forked up front";
  EXPECT_EQ(loader.stats().workers, 1u) << "it starts with one";
  EXPECT_EQ(loader.stats().auto_tuning, "1 worker, prefetch 2 (auto: tuning)");
  for (int epoch = 0; epoch < 3; ++epoch) EXPECT_EQ(run_epoch(loader, 1, schema_), want);
  const Stats s = loader.stats();
  EXPECT_GE(s.workers, 1u);
  EXPECT_LE(s.workers, cores);
  EXPECT_THAT(s.auto_tuning, HasSubstr("(auto: "));
}

// Auto workers count the CPUs this process may run on, not the machine's: a process pinned to one
// CPU (taskset, a container's cpuset) forks one worker, not one per core.
TEST_F(LoaderData, AutoWorkersAreAsManyAsTheCpusThisProcessMayUse) {
  cpu_set_t all;
  ASSERT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
  if (CPU_COUNT(&all) < 2) GTEST_SKIP() << "one CPU: pinning to one changes nothing";
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  struct Pinned {  // this thread on one CPU until the test ends, however it ends
    const cpu_set_t& all;
    ~Pinned() { ::sched_setaffinity(0, sizeof all, &all); }
  } pinned{all};
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  Options o = options("d.lmdb", 2, 3);
  o.num_workers = kAuto;
  Loader loader(o);
  EXPECT_EQ(loader.worker_pids().size(), 1u) << "pinned to one of " << CPU_COUNT(&all) << " CPUs";
  std::vector<std::uint64_t> want(100);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(run_epoch(loader, 0, schema_), want);
}

// A training loop slower than loading never waits, so the tuner adds nothing.
TEST(LoaderAuto, ASlowTrainingLoopKeepsOneWorker) {
  TempDir tmp;
  Schema schema = small_schema(400);
  write_lmdb(tmp.path("d.lmdb"), schema);
  Options o;
  o.source = tmp.path("d.lmdb");
  o.batch_size = 8;
  o.num_workers = kAuto;
  Loader loader(o);
  for (Batch& b : loader.epoch(0)) {
    (void)b;
    // A 60 ms step; loading a batch takes microseconds, and a worker has the whole step to fill the
    // next. (The tuner adds a worker when the loop waits 5 % of an interval, of 8 batches before
    // its first step: here 24 ms, which only a worker held off a CPU for 84 ms makes it wait. With
    // 16 batches of a 10 ms step, one descheduling of the worker for 8 ms on a loaded machine did
    // that.)
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  EXPECT_EQ(loader.stats().workers, 1u);
  EXPECT_EQ(loader.stats().auto_tuning, "1 worker, prefetch 2 (auto: tuning)");
}

TEST_F(LoaderData, FieldsCanBeSelectedAndOrdered) {
  Options o = options("d.lmdb", 2, 9);
  o.fields = {"weight", "image"};
  Loader loader(o);
  ASSERT_EQ(loader.schema().fields.size(), 2u);
  EXPECT_EQ(loader.schema().fields[0].name, "weight");
  Schema selected = schema_;
  selected.fields = {schema_.fields[2], schema_.fields[0]};
  run_epoch(loader, 0, selected);
}

TEST_F(LoaderData, ThreeRanksCompleteAndAreDisjointApartFromPadding) {
  std::map<std::uint64_t, int> seen;
  for (std::uint32_t rank = 0; rank < 3; ++rank) {
    Options o = options("d.h5", 2, 5);
    o.shuffle = true;
    o.shard = Shard{rank, 3};
    Loader loader(o);
    auto order = run_epoch(loader, 4, schema_);
    EXPECT_EQ(order.size(), 34u);
    for (auto i : order) ++seen[i];
  }
  EXPECT_EQ(seen.size(), 100u);
  int twice = 0;
  for (auto [i, c] : seen) twice += c == 2;
  EXPECT_EQ(twice, 2);  // 3 * 34 - 100 samples of padding
}

TEST_F(LoaderData, ParentKeepsItsOwnHdf5AndLmdbHandlesOpen) {
  hid_t file = H5Fopen(tmp_.path("d.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t dset = H5Dopen2(file, "label", H5P_DEFAULT);
  formats::LmdbEnv env;
  mdb_env_set_maxdbs(env.get(), 4);
  ASSERT_EQ(0, mdb_env_open(env.get(), tmp_.path("d.lmdb").c_str(), MDB_NOSUBDIR | MDB_RDONLY, 0644));
  for (const char* f : {"d.h5", "d.lmdb"}) {
    Loader loader(options(f, 2, 16));
    run_epoch(loader, 0, schema_);
    run_epoch(loader, 1, schema_);
  }
  // The parent's handles still work.
  std::vector<std::int64_t> labels(100);
  EXPECT_GE(H5Dread(dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()), 0);
  auto want = expected_field(schema_.fields[1], 42);
  EXPECT_EQ(0, std::memcmp(&labels[42], want.data(), 8));
  H5Dclose(dset);
  H5Fclose(file);
}

TEST_F(LoaderData, HoldingEverySlotRaisesTheHeldErrorAndReleasingResumes) {
  for (std::size_t workers : {0, 2}) {
    Options o = options("d.lmdb", workers, 10);
    o.prefetch = workers ? 1 : 2;  // two slots either way
    Loader loader(o);
    Epoch epoch = loader.epoch(0);
    std::optional<Batch> a = epoch.next(), b = epoch.next();
    ASSERT_TRUE(a && b);
    try {
      epoch.next();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::slots_held) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("all 2 batch slots are held"));
      EXPECT_THAT(e.what(), HasSubstr("batches 0, 1 of epoch 0"));
      EXPECT_THAT(e.what(), HasSubstr("release()"));
    }
    check_batch(*a, schema_);
    a.reset();
    b->release();
    std::uint64_t rest = 0;
    while (auto c = epoch.next()) {
      EXPECT_EQ(c->index(), 2 + rest++);
      check_batch(*c, schema_);
    }
    EXPECT_EQ(rest, 8u);
  }
}

// Options::held_batches: slots beyond num_workers * prefetch (or the buffers without workers) for
// the batches the loop keeps, so that a loop keeping its last batch while asking for the next runs
// at prefetch 1, and the held error comes only when more than that are kept.
TEST_F(LoaderData, HeldBatchesHaveSlotsOfTheirOwn) {
  for (std::size_t workers : {0, 1}) {
    SCOPED_TRACE(testing::Message() << "workers " << workers);
    Options o = options("d.lmdb", workers, 10);
    o.prefetch = 1;
    o.held_batches = 1;
    Loader loader(o);
    const std::uint32_t slots = 2;  // without workers: one to load into, one kept; else one per worker, one kept
    EXPECT_EQ(loader.stats().depth, slots);
    Epoch epoch = loader.epoch(0);
    std::optional<Batch> last;
    std::uint64_t seen = 0;
    while (std::optional<Batch> b = epoch.next()) {  // the last batch kept until the next arrives
      EXPECT_EQ(b->index(), seen++);
      check_batch(*b, schema_);
      last = std::move(b);
    }
    EXPECT_EQ(seen, 10u);
    last.reset();
    epoch = loader.epoch(1);
    std::vector<Batch> kept;
    for (std::uint32_t k = 0; k < slots; ++k) kept.push_back(std::move(*epoch.next()));
    try {
      epoch.next();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::slots_held) << e.what();
      EXPECT_THAT(e.what(), HasSubstr("all " + std::to_string(slots) + " batch slots are held"));
      EXPECT_THAT(e.what(), HasSubstr("raise Options::held_batches to the number of batches you keep"));
    }
  }
}

TEST_F(LoaderData, BatchesOutliveTheLoader) {
  std::vector<Batch> kept;
  {
    Options o = options("d.h5", 2, 10);
    o.prefetch = 3;
    Loader loader(o);
    Epoch e = loader.epoch(0);
    for (int i = 0; i < 3; ++i) kept.push_back(std::move(*e.next()));
  }
  for (auto& b : kept) check_batch(b, schema_);
}

TEST_F(LoaderData, AnEpochThatOutlivesItsLoaderSaysSo) {
  std::optional<Epoch> e;
  {
    Loader loader(options("d.lmdb", 1, 10));
    e.emplace(loader.epoch(0));
    ASSERT_TRUE(e->next());
  }
  try {
    (void)e->next();
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_option);
    EXPECT_THAT(error.what(), HasSubstr("this epoch's Loader was destroyed"));
  }
}

TEST_F(LoaderData, AWorkerErrorIsRaisedAtItsBatchAndLaterBatchesStillCome) {
  // Sample 15 of a copy has a value of the wrong size.
  const std::string p = tmp_.path("bad.lmdb");
  write_lmdb(p, schema_);
  overwrite_lmdb_record(p, 15, "abc");
  for (std::size_t workers : {0, 2}) {
    SCOPED_TRACE(workers);
    Options o = options("bad.lmdb", workers, 10);
    Loader loader(o);
    Epoch epoch = loader.epoch(0);
    check_batch(*epoch.next(), schema_);
    try {
      epoch.next();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::dataset) << e.what();
      if (workers) {
        EXPECT_THAT(e.what(), HasSubstr("worker "));
        EXPECT_THAT(e.what(), HasSubstr("(pid "));
      }
      EXPECT_THAT(e.what(), HasSubstr("batch 1 of epoch 0"));
      EXPECT_THAT(e.what(), HasSubstr(p));
      EXPECT_THAT(e.what(), HasSubstr("sample 15"));
      EXPECT_THAT(e.what(), HasSubstr("has 3 bytes"));
    }
    int later = 0;
    while (auto b = epoch.next()) {
      EXPECT_EQ(b->index(), 2u + later++);
      check_batch(*b, schema_);
    }
    EXPECT_EQ(later, 8);
  }
}

TEST_F(LoaderData, StartingAnotherEpochEndsTheFirstAndResumeStartsMidEpoch) {
  Options o = options("d.h5", 2, 10);
  o.shuffle = true;
  Loader loader(o);
  Epoch first = loader.epoch(0);
  first.next();
  first.next();
  Epoch resumed = loader.epoch(0, 3);
  EXPECT_THROW(first.next(), Error);
  auto perm = detail::permutation(100, 0, 0);
  std::vector<std::uint64_t> got;
  while (auto b = resumed.next()) {
    check_batch(*b, schema_);
    got.insert(got.end(), b->indices().begin(), b->indices().end());
  }
  EXPECT_EQ(got, std::vector<std::uint64_t>(perm.begin() + 30, perm.end()));
  EXPECT_THROW(loader.epoch(0, 11), Error);
  run_epoch(loader, 1, schema_);
}

TEST_F(LoaderData, StatsCountWhatWasDelivered) {
  Loader loader(options("d.lmdb", 2, 10));
  run_epoch(loader, 0, schema_);
  Stats s = loader.stats();
  EXPECT_EQ(s.batches, 10u);
  EXPECT_EQ(s.samples, 100u);
  EXPECT_EQ(s.bytes, 100u * 76);
  EXPECT_EQ(s.workers, 2u);
  EXPECT_EQ(s.depth, 4u);
  EXPECT_GT(s.shm_bytes, 4u * 4096);
  EXPECT_EQ(loader.worker_pids().size(), 2u);
}

TEST_F(LoaderData, ContentDigestIsEqualAcrossFormatsAndWorkers) {
  std::set<std::string> digests;
  for (const char* file : {"d.h5", "gz.h5", "d.lmdb"}) {
    for (std::size_t workers : {0, 3}) {
      Options o = options(file, workers, 6);
      o.shuffle = workers > 0;
      Loader loader(o);
      ContentDigest d;
      for (Batch& b : loader.epoch(0)) d.add(b);
      digests.insert(d.hex());
    }
  }
  EXPECT_EQ(digests.size(), 1u);
  ContentDigest direct;
  for (std::uint64_t i = 0; i < 100; ++i) direct.add(i, expected_sample(schema_, i));
  EXPECT_EQ(*digests.begin(), direct.hex());
}

// The shared-memory budget decides the ring's depth: lowered with one warning when the wanted
// depth does not fit, refused with the numbers when not even one slot per worker does. Driven by
// Options::shm_budget, so it needs no privileges (the 64 MiB /dev/shm test needs a mount).
TEST_F(LoaderData, TheBudgetLowersTheRingOrRefusesWithTheNumbers) {
  Options o = options("d.lmdb", 2, 8);
  o.prefetch = 2;  // wants 4 slots
  const detail::SegmentLayout layout(schema_, o.batch_size, 2);
  std::vector<std::string> warnings;
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };

  o.shm_budget = layout.segment_bytes(3);  // 3 slots fit exactly, 4 do not
  {
    Loader loader(o);
    EXPECT_EQ(loader.stats().depth, 3u);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_THAT(warnings[0], HasSubstr("ring lowered from 4 to 3 batches"));
    EXPECT_THAT(warnings[0], HasSubstr("the shm budget option"));
    std::vector<std::uint64_t> order = run_epoch(loader, 0, schema_);
    std::vector<std::uint64_t> all(schema_.num_samples);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(order, all);
  }
  warnings.clear();
  o.shm_budget = layout.segment_bytes(4);
  {
    Loader loader(o);
    EXPECT_EQ(loader.stats().depth, 4u);
    EXPECT_TRUE(warnings.empty());
  }
  o.shm_budget = layout.segment_bytes(2) - 1;  // not even one slot per worker
  try {
    Loader loader(o);
    ADD_FAILURE() << "a loader that cannot fit was created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::shm) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("not enough shared memory for 2 workers: needs " +
                                    detail::format_bytes(layout.segment_bytes(2)) + " (2 batch slots of"));
    EXPECT_THAT(e.what(), HasSubstr("the shm budget option of " + detail::format_bytes(layout.segment_bytes(2) - 1)));
    // The option is what holds the ring back: raising it is the advice, not a larger container.
    EXPECT_THAT(e.what(), HasSubstr("Raise the shm budget option (Options::shm_budget) to " +
                                    detail::format_bytes(layout.segment_bytes(2)) + " or more"));
    EXPECT_THAT(e.what(), Not(HasSubstr("--shm-size=")));
  }
}

TEST(LoaderOptions, BadOptionsAndInputsAreClearErrors) {
  TempDir tmp;
  write_lmdb(tmp.path("d.lmdb"), small_schema(10));
  auto expect = [](Options o, ErrorCode code, const std::string& part) {
    try {
      Loader loader(o);
      FAIL() << "no error for " << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(part));
    }
  };
  Options o;
  expect(o, ErrorCode::invalid_option, "source is empty");
  o.source = tmp.path("d.lmdb");
  o.batch_size = 0;
  expect(o, ErrorCode::invalid_option, "batch_size is 0");
  o.batch_size = 4;
  o.prefetch = 0;
  expect(o, ErrorCode::invalid_option, "prefetch is 0");
  o.prefetch = 2;
  o.shm_fraction = 0.9;
  expect(o, ErrorCode::invalid_option, "shm_fraction");
  o.shm_fraction = 0.5;
  o.batch_size = 11;
  o.drop_last = true;
  expect(o, ErrorCode::invalid_option, "no batch per epoch");
  o.drop_last = false;
  o.fields = {"nope"};
  o.num_workers = 2;
  expect(o, ErrorCode::invalid_option, "unknown field 'nope'");
  o.fields = {};
  o.source = tmp.path("missing.h5");
  expect(o, ErrorCode::dataset, "missing.h5: No such file");
}

TEST(ShardFromEnv, ReadsTorchrunAndOpenMpiAndNeverGuesses) {
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_THROW(Shard::from_env(), Error);
  ::setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  EXPECT_EQ(Shard::from_env().rank, 1u);
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "3", 1);
  Shard s = Shard::from_env();
  EXPECT_EQ(s.rank, 2u);
  EXPECT_EQ(s.world_size, 3u);
  ::setenv("RANK", "x", 1);
  EXPECT_THROW(Shard::from_env(), Error);
  ::unsetenv("WORLD_SIZE");
  ::setenv("RANK", "0", 1);
  EXPECT_THROW(Shard::from_env(), Error);
  ::unsetenv("RANK");
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

// A stray launcher variable, with sharding not asked for, does not stop a loader with workers: the
// shared memory is sized for one rank on this node and a warning says why.
TEST(ShardFromEnv, AStrayLauncherVariableOnlyWarnsWhenShardingIsNotAskedFor) {
  TempDir tmp;
  write_lmdb(tmp.path("d.lmdb"), small_schema(10));
  Options o;
  o.source = tmp.path("d.lmdb");
  o.batch_size = 4;
  o.num_workers = 1;
  std::vector<std::string> warnings;
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  ::setenv("RANK", "0", 1);
  Loader loader(o);
  ::unsetenv("RANK");
  EXPECT_EQ(run_epoch(loader, 0, small_schema(10)).size(), 10u);
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(warnings);
  EXPECT_THAT(warnings[0], HasSubstr("RANK is set but WORLD_SIZE is not"));
  EXPECT_THAT(warnings[0], HasSubstr("assumes this is the only rank on this node"));
  EXPECT_THROW(Shard::from_env(), Error);  // asked for, it stays an error
}

}  // namespace
}  // namespace stoker::test
