// A shard set's index (loader/set_index.h) beside the shards on a real server the test starts on
// 127.0.0.1: a loader on a node that never read the set fetches nothing before its first batch and
// reads the epoch the local shards give; a shard changed since the index was written is an error
// naming it; an index that does not describe the store, or was written with other reader options,
// is not used, and a warning says why. The loop's waits while the ring waits for a shard are fetch
// waits.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "stoker/loader.h"
#include "stoker/pipeline.h"
#include "tests/remote/remote_fixtures.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

// The index of the three shards in `dir`, written beside them by a loader of the local set.
std::string write_local_index(const TempDir& tmp, const std::string& dir) {
  Options local;
  local.source = tmp.path(dir + "/train-*.h5");
  return Loader(local).write_index();
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(SetIndex, ANodeThatNeverReadTheSetFetchesNothingBeforeItsFirstBatchAndReadsItAsItArrives) {
  TempDir tmp;
  write_shards(tmp, "served");
  EXPECT_EQ(write_local_index(tmp, "served"), tmp.path("served/stoker-index.json"));
  FaultServer server(tmp, tmp.path("served"));
  Loader first(remote_options(tmp, server));
  EXPECT_EQ(first.stats().downloads, 0u) << "nothing fetched to count the samples";
  EXPECT_EQ(first.schema().num_samples, 100u);
  EXPECT_EQ(epoch_bytes(first), local_epoch(tmp));
  EXPECT_EQ(first.stats().downloads, 3u);
  for (Batch& b : first.epoch(1)) (void)b;
  EXPECT_EQ(first.stats().downloads, 3u) << "a cache that holds the set never fetches a shard again";
  EXPECT_EQ(first.stats().evictions, 0u);
  // Another rank on the node finds the set cached whole: it asks the store for no index.
  Loader second(remote_options(tmp, server, 0));
  EXPECT_EQ(second.stats().downloads, 0u);
  EXPECT_EQ(second.stats().cache_hits, 3u);
  EXPECT_EQ(epoch_bytes(second), local_epoch(tmp));
  EXPECT_EQ(occurrences(server.log(), "stoker-index.json"), 1u) << server.log();
  // Through a cache smaller than the set, with a reader that selects fields, the same: nothing
  // fetched before the first batch.
  Options small = remote_options(tmp, server);
  small.cache_dir = tmp.path("small-cache");
  small.cache_limit = 2 * std::filesystem::file_size(tmp.path("served/train-0.h5"));
  small.fields = {"label"};
  small.shuffle = false;  // in storage order, each batch of 5 in one shard
  small.batch_size = 5;
  Loader streamed(small);
  EXPECT_EQ(streamed.stats().downloads, 0u);
  EXPECT_EQ(streamed.schema().fields.size(), 1u);
  std::vector<std::int64_t> labels;
  std::vector<std::int64_t> want;
  for (Batch& b : streamed.epoch(0)) {
    const auto* l = reinterpret_cast<const std::int64_t*>(b.fields()[0].data);
    labels.insert(labels.end(), l, l + b.size());
  }
  Options local = small;
  local.source = tmp.path("served/train-*.h5");
  Loader here(local);
  for (Batch& b : here.epoch(0)) {
    const auto* l = reinterpret_cast<const std::int64_t*>(b.fields()[0].data);
    want.insert(want.end(), l, l + b.size());
  }
  EXPECT_EQ(labels.size(), 100u);
  EXPECT_EQ(labels, want);
  EXPECT_EQ(streamed.stats().downloads, 3u);
}

// hold(ms) on an i64 field: passes it through after `ms` milliseconds (a slow worker).
OpSpec hold_spec(const OpSpec& in, std::span<const double>) { return in; }
void hold(const SampleIn& in, SampleOut& out, std::span<const double> args, SampleRandom&) {
  std::memcpy(out.resize(in.dtype, in.shape), in.data.data(), in.data.size());
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(args[0]));
}

// Shard 1 arrives 2.2 s after it is asked for, at the earliest (its fetch pauses 2 s after 100
// bytes, then breaks off; the request before, its stat, is answered). Meanwhile the four batches
// of shard 0 are filled, 270 ms each, and the ring's room waits for shard 1: the loop's waits for
// those batches are fetch waits as much as its wait for batch 4, so the epoch's fetch waits last
// until shard 1 came. (Counted only while nothing was in flight, they were 1.1 s shorter.)
TEST(SetIndex, TheLoopsWaitsWhileTheRingWaitsForAShardAreFetchWaits) {
  TempDir tmp;
  write_shards(tmp, "served");
  write_local_index(tmp, "served");
  FaultServer server(tmp, tmp.path("served"), R"({"train-1.h5": ["ok", "stall:100:2"]})");
  Options o = remote_options(tmp, server, 1);
  o.shuffle = false;  // batches 0 to 3 in shard 0; batch 4 begins shard 1
  o.prefetch = 8;     // room for every batch of shard 0, and more
  o.pipeline = "label=hold(30)";
  Loader l(o);
  for (Batch& b : l.epoch(0)) (void)b;
  EXPECT_GE(l.stats().fetch_wait_seconds, 1.8);
  EXPECT_LE(l.stats().fetch_wait_seconds, l.stats().wait_seconds);
}

TEST(SetIndex, AShardThatChangedSinceTheIndexWasWrittenIsAnErrorNamingIt) {
  TempDir tmp;
  write_shards(tmp, "served");
  write_local_index(tmp, "served");
  {  // the same size, other bytes in its middle
    const std::string path = tmp.path("served/train-1.h5");
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(std::filesystem::file_size(path) / 2);
    std::string bytes(64, '\0');
    f.seekg(middle);
    f.read(bytes.data(), 64);
    for (char& c : bytes) c = static_cast<char>(~c);
    f.seekp(middle);
    f.write(bytes.data(), 64);
  }
  FaultServer server(tmp, tmp.path("served"));
  {
    Loader loader(remote_options(tmp, server));
    try {
      for (Batch& b : loader.epoch(0)) (void)b;
      ADD_FAILURE() << "the changed shard was read";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::dataset);
      EXPECT_THAT(e.what(), HasSubstr("/train-1.h5: its bytes are not those the set's index (stoker-index.json"));
      EXPECT_THAT(e.what(), HasSubstr("write it again (Loader::write_index), or delete it"));
    }
  }
  // Written again, as the error says: the next loader on the node reads the set (nothing of the
  // stale index was kept in the cache).
  write_local_index(tmp, "served");
  Loader again(remote_options(tmp, server));
  EXPECT_EQ(epoch_bytes(again), local_epoch(tmp));
}

// The index is a fresh probe of the set, even when written by a loader that has counted it: the
// bound of a variable-length field is the largest of every shard's, not the first shard's.
TEST(SetIndex, AnIndexBoundsEveryShardsSamples) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.path("set"));
  for (int k = 0; k < 3; ++k) {
    H5Builder h5(tmp.path(fmt::format("set/part-{}.h5", k)));
    std::vector<std::vector<std::byte>> samples(4, std::vector<std::byte>(10, std::byte{1}));
    if (k == 2) samples[3].resize(5000, std::byte{2});
    h5.vlen("data", samples);
  }
  Options o;
  o.source = tmp.path("set/part-*.h5");
  o.num_workers = 2;
  Loader loader(o);
  std::ifstream in(loader.write_index());
  const nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_GE(index.at("probe").at("bounds").at(0).at(0).get<std::uint64_t>(), 5000u) << index.at("probe").dump();
  EXPECT_EQ(index.at("probe").at("shard_samples"), nlohmann::json::array({4, 4, 4}));
}

TEST(SetIndex, AnIndexThatDoesNotDescribeTheStoreOrThisReaderIsNotUsedAndAWarningSaysWhy) {
  TempDir tmp;
  write_shards(tmp, "served");
  write_local_index(tmp, "served");
  write_hdf5(tmp.path("served/train-1.h5"), small_schema(30), {});  // 30 samples now, not 25
  FaultServer server(tmp, tmp.path("served"));
  std::vector<std::string> warnings;
  Options o = remote_options(tmp, server);
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  Loader stale(o);
  EXPECT_EQ(stale.stats().downloads, 3u) << "fetched to be counted";
  EXPECT_EQ(stale.schema().num_samples, 105u);
  EXPECT_EQ(epoch_bytes(stale), local_epoch(tmp));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("/stoker-index.json does not describe the shards beside it (it lists train-1.h5 "
                                     "as "));
  EXPECT_THAT(warnings[0], HasSubstr("it is not used, and the set is learned without it"));

  write_local_index(tmp, "served");  // describes the store again
  warnings.clear();
  o.cache_dir = tmp.path("cache-2");
  o.format = Format::hdf5;  // said, where the index's loader let stoker find it
  Loader other(o);
  EXPECT_EQ(other.stats().downloads, 3u);
  EXPECT_EQ(epoch_bytes(other), local_epoch(tmp));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("/stoker-index.json is not used (it was written by a loader with another format"));
}

// A loader that cached a remote set whole writes its index, named as the store names the shards:
// stored beside them, a loader on another node (another cache) starts from it.
TEST(SetIndex, AnIndexWrittenFromTheCacheDescribesTheStore) {
  TempDir tmp;
  write_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  Loader cached(remote_options(tmp, server));
  EXPECT_EQ(cached.stats().downloads, 3u);
  EXPECT_EQ(cached.write_index(tmp.path("served/stoker-index.json")), tmp.path("served/stoker-index.json"));
  Options elsewhere = remote_options(tmp, server);
  elsewhere.cache_dir = tmp.path("other-node");
  Loader cold(elsewhere);
  EXPECT_EQ(cold.stats().downloads, 0u);
  EXPECT_EQ(epoch_bytes(cold), local_epoch(tmp));
}

// An index the store fails to give is no reason to fail the loader: a warning, and the set is
// counted as without one.
TEST(SetIndex, AnIndexTheStoreFailsToGiveIsAWarning) {
  TempDir tmp;
  write_shards(tmp, "served");
  write_local_index(tmp, "served");
  FaultServer server(tmp, tmp.path("served"), R"({"stoker-index.json": ["always:500"]})");
  std::vector<std::string> warnings;
  Options o = remote_options(tmp, server);
  o.fetch_timeout = std::chrono::milliseconds(600);
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  Loader loader(o);
  EXPECT_EQ(loader.stats().downloads, 3u);
  EXPECT_EQ(epoch_bytes(loader), local_epoch(tmp));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("/stoker-index.json: could not be read ("));
  EXPECT_THAT(warnings[0], HasSubstr("the set is learned without it"));
}

TEST(SetIndex, WhatAnIndexCannotBeWrittenForIsAnError) {
  TempDir tmp;
  write_shards(tmp, "served");
  Options mix;
  mix.mix = {Source{tmp.path("served/train-0.h5"), 1.0}, Source{tmp.path("served/train-1.h5"), 1.0}};
  mix.batch_size = 5;
  try {
    (void)Loader(mix).write_index();
    ADD_FAILURE() << "an index of a mix";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_THAT(e.what(), HasSubstr("this loader mixes 2 sources, and an index describes one shard set"));
  }
  FaultServer server(tmp, tmp.path("served"));
  Options small = remote_options(tmp, server, 0);
  small.cache_limit = std::filesystem::file_size(tmp.path("served/train-0.h5")) + 1;
  small.order = Order::quasi_random;
  small.batch_size = 5;
  Loader streamed(small);
  try {
    (void)streamed.write_index();
    ADD_FAILURE() << "an index written into the cache";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_THAT(e.what(), HasSubstr("reads its shards from a store, through the node's cache: give the index a path"));
  }
  try {
    (void)streamed.write_index(tmp.path("index.json"));
    ADD_FAILURE() << "an index of a set not all here";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_THAT(e.what(), HasSubstr("not all its shards are in the cache now"));
  }
  std::filesystem::create_directories(tmp.path("dir.lmdb"));
  write_lmdb(tmp.path("dir.lmdb/data.mdb"), small_schema(10));
  Options lmdb;
  lmdb.source = tmp.path("dir.lmdb");
  try {
    (void)Loader(lmdb).write_index(tmp.path("index.json"));
    ADD_FAILURE() << "an index of an LMDB directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_THAT(e.what(), HasSubstr("dir.lmdb: not a file, and a store holds each shard as one"));
  }
  EXPECT_FALSE(std::filesystem::exists(tmp.path("index.json")));
}

}  // namespace
}  // namespace stoker::test

STOKER_REGISTER_OP(hold, stoker::test::hold_spec, stoker::test::hold);
