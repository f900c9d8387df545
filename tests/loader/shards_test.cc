// Shard sets: many files (HDF5 or LMDB) read as one dataset, their samples concatenated in order,
// named as a list, a glob or a directory; a shard that differs is an error naming it; a reader
// keeps a bounded number of shards open; a loader state resumes only the same shard set.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "formats/shard_set.h"
#include "formats/sharded_reader.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

// Shards of small_schema: shard k holds samples 0 .. sizes[k]-1 of the generator.
struct ShardFiles {
  std::vector<std::string> paths;
  std::vector<std::uint64_t> sizes;
  // The shard and local index of global sample g.
  std::pair<std::size_t, std::uint64_t> locate(std::uint64_t g) const {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      if (g < sizes[k]) return {k, g};
      g -= sizes[k];
    }
    ADD_FAILURE() << "sample past the shards";
    return {0, 0};
  }
  std::uint64_t total() const { return std::accumulate(sizes.begin(), sizes.end(), std::uint64_t{0}); }
};

ShardFiles write_shards(const TempDir& tmp, const std::string& dir, const std::vector<std::uint64_t>& sizes,
                        bool lmdb_odd = false) {
  std::filesystem::create_directories(tmp.path(dir));
  ShardFiles s;
  s.sizes = sizes;
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const bool lmdb = lmdb_odd && k % 2 == 1;
    const std::string p = tmp.path(dir + "/train-" + std::to_string(k) + (lmdb ? ".lmdb" : ".h5"));
    if (lmdb) {
      write_lmdb(p, small_schema(sizes[k]));
    } else {
      write_hdf5(p, small_schema(sizes[k]), {formats::Hdf5WriteOptions::Layout::chunked, 8, k % 2 ? 0 : 1});
    }
    s.paths.push_back(p);
  }
  return s;
}

// Every sample of one epoch of `o`, checked against its shard's generator; the global indices in
// delivery order.
std::vector<std::uint64_t> read_all(const Options& o, const ShardFiles& shards) {
  Loader loader(o);
  const Schema schema = small_schema(1);
  EXPECT_EQ(loader.schema().num_samples, shards.total());
  std::vector<std::uint64_t> order;
  for (Batch& b : loader.epoch(0)) {
    for (std::size_t f = 0; f < schema.fields.size(); ++f) {
      const FieldView& v = b.fields()[f];
      for (std::size_t i = 0; i < b.size(); ++i) {
        const auto [k, local] = shards.locate(b.indices()[i]);
        const auto want = expected_field(schema.fields[f], local);
        EXPECT_EQ(0, std::memcmp(v.data + i * want.size(), want.data(), want.size()))
            << "field " << schema.fields[f].name << ", sample " << b.indices()[i] << " (shard " << k << ", sample "
            << local << ")";
      }
    }
    order.insert(order.end(), b.indices().begin(), b.indices().end());
  }
  return order;
}

Options options_for(std::size_t workers, Order order = Order::sequential) {
  Options o;
  o.batch_size = 7;
  o.num_workers = workers;
  o.order = order;
  o.seed = 3;
  return o;
}

TEST(Shards, ASetReadsAsItsShardsConcatenatedNamedAsAListAGlobOrADirectory) {
  TempDir tmp;
  const ShardFiles shards = write_shards(tmp, "set", {40, 25, 35});
  std::vector<std::uint64_t> all(shards.total());
  std::iota(all.begin(), all.end(), 0);
  for (std::size_t workers : {0u, 2u}) {
    Options list = options_for(workers);
    list.sources = shards.paths;
    EXPECT_EQ(read_all(list, shards), all) << workers << " workers";
    Options glob = options_for(workers);
    glob.source = tmp.path("set/train-*.h5");
    EXPECT_EQ(read_all(glob, shards), all);
    Options dir = options_for(workers);
    dir.source = tmp.path("set");
    { std::ofstream(tmp.path("set/manifest.json")) << "{}"; }  // not a shard
    EXPECT_EQ(read_all(dir, shards), all);
    // Shuffled: every sample once, the same order for any number of workers.
    Options shuffled = options_for(workers, Order::random);
    shuffled.sources = shards.paths;
    std::vector<std::uint64_t> got = read_all(shuffled, shards);
    EXPECT_NE(got, all);
    EXPECT_EQ(std::set<std::uint64_t>(got.begin(), got.end()).size(), all.size());
  }
}

TEST(Shards, HdfAndLmdbShardsOfTheSameFieldsMakeOneSet) {
  TempDir tmp;
  const ShardFiles shards = write_shards(tmp, "mixed", {12, 30, 9, 20}, /*lmdb_odd=*/true);
  Options o = options_for(2, Order::quasi_random);
  o.sources = shards.paths;
  const std::vector<std::uint64_t> got = read_all(o, shards);
  EXPECT_EQ(std::set<std::uint64_t>(got.begin(), got.end()).size(), shards.total());
}

TEST(Shards, AShardWithOtherFieldsIsAnErrorNamingItAndTheDifference) {
  TempDir tmp;
  const ShardFiles shards = write_shards(tmp, "set", {10, 10});
  Schema other = small_schema(10);
  other.fields[0].shape = {3, 4, 6};
  const std::string odd = tmp.path("set/train-2.h5");
  write_hdf5(odd, other, {});
  Options o = options_for(2);
  o.sources = {shards.paths[0], shards.paths[1], odd};
  expect_error(ErrorCode::dataset, [&] { Loader l(o); },
               {odd + ": shard 2 of 3 has fields image: u8[3,4,6]", "and " + shards.paths[0] +
                                                                        " (the first shard) has "
                                                                        "image: u8[3,4,5]"});
}

TEST(Shards, WhatNamesNoShardIsAnError) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.path("empty"));
  Options glob = options_for(0);
  glob.source = tmp.path("none-*.h5");
  expect_error(ErrorCode::dataset, [&] { Loader l(glob); }, {tmp.path("none-*.h5") + ": no file matches the pattern"});
  // A directory's shards are its HDF5 and LMDB files: a README or a manifest beside them is not one.
  { std::ofstream(tmp.path("empty/README.md")) << "shards of the training set\n"; }
  Options dir = options_for(0);
  dir.source = tmp.path("empty");
  expect_error(ErrorCode::dataset, [&] { Loader l(dir); }, {tmp.path("empty") + ": a directory that holds no shard"});
  Options both = options_for(0);
  both.source = "a.h5";
  both.sources = {"b.h5"};
  expect_error(ErrorCode::invalid_option, [&] { Loader l(both); }, {"both source ('a.h5') and sources (1 entries)"});
}

// 6 shards read in a random order through a reader that keeps 2 open: every sample right, shards
// closed and opened again as needed, never more than 2 open.
TEST(Shards, AReaderKeepsAtMostMaxOpenShardsOpen) {
  TempDir tmp;
  const ShardFiles shards = write_shards(tmp, "set", {5, 6, 7, 5, 6, 7});
  std::string source;
  for (const auto& p : shards.paths) source += (source.empty() ? "" : "\n") + p;
  formats::ReaderOptions options;
  options.max_open_shards = 2;
  formats::ShardedReader r(shards.paths, options);
  EXPECT_EQ(r.schema().num_samples, 36u);
  EXPECT_EQ(r.shard_samples(), shards.sizes);
  EXPECT_EQ(r.shard_opens(), 6u);  // each once, to count it and check its fields
  const Schema schema = small_schema(1);
  const std::vector<std::uint64_t> indices{35, 0, 17, 18, 1, 30, 12, 29, 5, 6, 7};
  std::vector<std::vector<std::byte>> bufs(schema.fields.size());
  std::vector<std::byte*> dest;
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    bufs[f].resize(indices.size() * schema.fields[f].bytes_per_sample());
    dest.push_back(bufs[f].data());
  }
  r.Reader::read(indices, std::span<std::byte* const>(dest));
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const auto [k, local] = shards.locate(indices[i]);
      const auto want = expected_field(schema.fields[f], local);
      EXPECT_EQ(0, std::memcmp(bufs[f].data() + i * want.size(), want.data(), want.size())) << indices[i];
    }
  }
  EXPECT_GT(r.shard_opens(), 6u + 2u);  // runs in 5 shards, 2 kept: most were opened again
  // An index past the set is the caller's bug, said as such, not a loop.
  const std::vector<std::uint64_t> past{3, 36};
  expect_error(ErrorCode::internal, [&] { r.Reader::read(past, std::span<std::byte* const>(dest)); },
               {"sample 36 of a shard set of 36"});
  // A worker's reader, given the counts, opens only the first shard until it reads another.
  options.shard_samples = shards.sizes;
  formats::ShardedReader worker(shards.paths, options);
  EXPECT_EQ(worker.shard_opens(), 1u);
  EXPECT_EQ(worker.schema().num_samples, 36u);
  EXPECT_EQ(formats::source_name(source), shards.paths[0] + " and 5 more shards");
}

// A shard closed by the reader's LRU and opened again must be the one it first read: one written
// in place meanwhile (an LMDB shard's new transaction) or replaced is an error naming it.
TEST(Shards, AShardWrittenWhileClosedIsRefusedWhenItIsOpenedAgain) {
  TempDir tmp;
  const ShardFiles shards = write_shards(tmp, "set", {5, 6, 7}, /*lmdb_odd=*/true);
  formats::ReaderOptions options;
  options.max_open_shards = 1;
  formats::ShardedReader r(shards.paths, options);
  const Schema schema = small_schema(1);
  std::vector<std::vector<std::byte>> bufs(schema.fields.size());
  std::vector<std::byte*> dest;
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    bufs[f].resize(schema.fields[f].bytes_per_sample());
    dest.push_back(bufs[f].data());
  }
  const auto read_one = [&](std::uint64_t i) {
    const std::vector<std::uint64_t> one{i};
    r.Reader::read(one, std::span<std::byte* const>(dest));
  };
  read_one(6);   // shard 1 (LMDB)
  read_one(12);  // shard 2: shard 1 is closed
  write_lmdb_note_in_place(shards.paths[1]);
  expect_error(ErrorCode::dataset, [&] { read_one(7); },
               {shards.paths[1] + ": shard 1 of 3 was replaced or written since the set was first read (",
                "its last LMDB transaction ("});
  read_one(0);  // shard 0 (HDF5), untouched: still read
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write_hdf5(shards.paths[2] + ".new", small_schema(7), {formats::Hdf5WriteOptions::Layout::chunked, 8, 1});
  std::filesystem::rename(shards.paths[2] + ".new", shards.paths[2]);
  expect_error(ErrorCode::dataset, [&] { read_one(12); },
               {shards.paths[2] + ": shard 2 of 3 was replaced or written since the set was first read (it is another "
                                  "file (device and inode)"});
}

// Overwrites the HDF5 shard at `path` in place (the same file: truncated and written again) with
// `n` samples of small_schema's fields, all zeros: a new version of the same fields and count.
// Returns its new size, which differs from the old one's (a contiguous layout, no compression), so
// that the change does not rest on the clock's resolution.
std::uintmax_t rewrite_shard_in_place(const std::string& path, std::uint64_t n) {
  const std::uintmax_t before = std::filesystem::file_size(path);
  const Schema schema = small_schema(n);
  {
    formats::Hdf5Writer w(path, schema, {formats::Hdf5WriteOptions::Layout::contiguous});
    for (std::size_t f = 0; f < schema.fields.size(); ++f) {
      const std::vector<std::byte> zeros(n * schema.fields[f].bytes_per_sample());
      w.write(f, 0, n, zeros.data());
    }
    w.close();
  }
  const std::uintmax_t after = std::filesystem::file_size(path);
  EXPECT_NE(before, after);
  return after;
}

// A worker's reader is given each shard's identity as the probe read it: a shard rewritten in
// place before the worker first opens it (the same fields and count, other samples) is an error
// naming it when it is opened, not samples of the new version.
TEST(Shards, AShardRewrittenBeforeAReaderFirstOpensItIsRefusedNamingIt) {
  TempDir tmp;
  const ShardFiles shards = write_shards(tmp, "set", {5, 6, 7});
  formats::ReaderOptions options;
  const formats::ShardedReader probe(shards.paths, options);
  ASSERT_EQ(probe.shard_identities().size(), 3u);
  for (const auto& id : probe.shard_identities()) EXPECT_TRUE(id.has_value());
  options.shard_samples = probe.shard_samples();
  options.shard_identities = probe.shard_identities();
  const std::uintmax_t before = std::filesystem::file_size(shards.paths[2]);
  const std::uintmax_t after = rewrite_shard_in_place(shards.paths[2], 7);
  formats::ShardedReader worker(shards.paths, options);
  const Schema schema = small_schema(1);
  std::vector<std::vector<std::byte>> bufs(schema.fields.size());
  std::vector<std::byte*> dest;
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    bufs[f].resize(schema.fields[f].bytes_per_sample());
    dest.push_back(bufs[f].data());
  }
  const auto read_one = [&](std::uint64_t i) {
    const std::vector<std::uint64_t> one{i};
    worker.Reader::read(one, std::span<std::byte* const>(dest));
  };
  read_one(0);   // shard 0, untouched
  read_one(10);  // shard 1, untouched
  // The size is what must differ (the modification time may not, within the clock's resolution).
  expect_error(ErrorCode::dataset, [&] { read_one(12); },
               {fmt::format("{}: shard 2 of 3 was replaced or written since the set was first read (its size ({} -> "
                            "{} bytes)",
                            shards.paths[2], before, after),
                "): its samples are not mixed into this loader's epochs; build a new Loader to read the new set"});
}

// The same through a Loader: its worker started (and read shard 0) before shard 2 was rewritten in
// place, and opens shard 2 only when the epoch reaches it. The epoch ends with an error naming the
// shard there, after the batches of the shards before it, never with the new version's samples.
// No worker can have opened shard 2 before the rewrite, whatever the timing: the loader issues at
// most Stats::depth batches beyond the last one handed over (batch 0 here, and a depth below 8),
// shard 2 starts at batch 8, and a worker opens a shard only to read a batch of it (its read-ahead
// hints go to shards already open).
TEST(Shards, AShardRewrittenInPlaceMidEpochIsAnErrorNamingItNotAMix) {
  TempDir tmp;
  const ShardFiles shards = write_shards(tmp, "set", {20, 20, 20});
  Options o = options_for(1);
  o.sources = shards.paths;
  o.batch_size = 5;  // shard 2 starts at batch 8
  o.prefetch = 1;
  Loader loader(o);
  ASSERT_LT(loader.stats().depth, 8u) << "the worker must not reach shard 2 before the rewrite";
  Epoch epoch = loader.epoch(0);
  std::optional<Batch> first = epoch.next();
  ASSERT_TRUE(first);
  first.reset();
  rewrite_shard_in_place(shards.paths[2], 20);
  std::uint64_t delivered = 1;
  const Caught e = caught([&] {
    while (std::optional<Batch> b = epoch.next()) {
      for (std::uint64_t i : b->indices()) EXPECT_LT(i, 40u) << "a sample of the rewritten shard was delivered";
      ++delivered;
    }
  });
  EXPECT_EQ(e.code, ErrorCode::dataset) << e.message;
  EXPECT_THAT(e.message, HasSubstr(shards.paths[2] + ": shard 2 of 3 was replaced or written since the set was first "
                                                     "read (its size ("));
  EXPECT_EQ(delivered, 8u);
}

// Stats::shard_opens counts what the readers opened: a sequential epoch through one open shard
// opens each shard once; a random one, far more.
TEST(Shards, StatsCountTheShardsWorkersOpened) {
  TempDir tmp;
  const ShardFiles shards = write_shards(tmp, "s", {20, 20, 20});
  for (std::size_t workers : {0u, 1u}) {
    Options o = options_for(workers);
    o.sources = shards.paths;
    o.max_open_shards = 1;
    {
      Loader loader(o);
      for (Batch& b : loader.epoch(0)) (void)b;
      // Without workers the loader's own reader also opened each shard once to count it; a worker
      // is given the counts and opens shard 0 only until it reads the others.
      const std::uint64_t first = workers == 0 ? 6 : 3;
      EXPECT_EQ(loader.stats().shard_opens, first) << workers << " workers";
      for (Batch& b : loader.epoch(1)) (void)b;
      EXPECT_EQ(loader.stats().shard_opens, first + 3) << "the second epoch opens every shard again";
    }
    o.order = Order::random;
    Loader random(o);
    for (Batch& b : random.epoch(0)) (void)b;
    EXPECT_GT(random.stats().shard_opens, 10u) << "60 samples of 3 shards in a random order, 1 kept open";
  }
}

// LMDB shards without a stoker schema (py-lmdb's): reopened again and again by a random order
// through one open shard, every sample is still its shard's value.
TEST(Shards, LmdbShardsWithoutASchemaReopenedByWorkersDeliverTheirValues) {
  TempDir tmp;
  std::vector<std::string> paths;
  std::vector<std::vector<std::byte>> want;
  for (int k = 0; k < 3; ++k) {
    std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>> records;
    for (int i = 0; i < 15; ++i) {
      const std::string key = std::to_string(i), value = fmt::format("shard {} sample {}", k, i);
      records.emplace_back(std::vector<std::byte>(reinterpret_cast<const std::byte*>(key.data()),
                                                  reinterpret_cast<const std::byte*>(key.data()) + key.size()),
                           std::vector<std::byte>(reinterpret_cast<const std::byte*>(value.data()),
                                                  reinterpret_cast<const std::byte*>(value.data()) + value.size()));
      want.push_back(records.back().second);
    }
    paths.push_back(tmp.path(fmt::format("p{}.lmdb", k)));
    test::write_plain_lmdb(paths.back(), records);
  }
  Options o = options_for(2, Order::random);
  o.sources = paths;
  o.max_open_shards = 1;
  Loader loader(o);
  std::set<std::uint64_t> seen;
  for (Batch& b : loader.epoch(0)) {
    const FieldView& f = b.field("data");
    for (std::size_t k = 0; k < b.size(); ++k) {
      const auto got = f.sample(k);
      EXPECT_EQ(std::vector<std::byte>(got.begin(), got.end()), want[b.indices()[k]]) << b.indices()[k];
      EXPECT_TRUE(seen.insert(b.indices()[k]).second);
    }
  }
  EXPECT_EQ(seen.size(), 45u);
  EXPECT_GT(loader.stats().shard_opens, 6u);
}

// A shard set's quasi-random order keeps its shards apart (docs/sampler.md, "A shard set"), and a
// state says so: a state saved by the order that did not (the same text as one file's) is refused.
TEST(Shards, AQuasiRandomStateOfASetNamesItsInterleaveAndTheOldOrdersStateIsRefused) {
  TempDir tmp;
  write_shards(tmp, "q", {40, 25, 35});
  Options o = options_for(2, Order::quasi_random);
  o.source = tmp.path("q");
  Loader loader(o);
  const LoaderState fresh = loader.state();
  EXPECT_EQ(fresh.order, "quasi_random(group=8,window=4,interleave=8)");
  LoaderState old = fresh;
  old.order = "quasi_random(group=8,window=4)";
  old.consumed = 10;
  const LoaderState saved = LoaderState::from_json(old.to_json());
  expect_error(ErrorCode::state_mismatch, [&] { loader.epoch(saved); },
               {"order quasi_random(group=8,window=4) in the state, quasi_random(group=8,window=4,interleave=8) "
                "here"});
}

TEST(Shards, AStateResumesTheSameShardsEvenCopiedElsewhereAndNoOtherSet) {
  TempDir tmp;
  const ShardFiles shards = write_shards(tmp, "a", {40, 25, 35});
  Options o = options_for(2, Order::random);
  o.source = tmp.path("a");
  LoaderState state;
  std::vector<std::uint64_t> first;
  {
    Loader loader(o);
    Epoch e = loader.epoch(0);
    for (int i = 0; i < 3; ++i) {
      auto b = e.next();
      ASSERT_TRUE(b);
      first.insert(first.end(), b->indices().begin(), b->indices().end());
    }
    state = loader.state();
    EXPECT_THAT(state.shards, HasSubstr("3 shards "));
  }
  // The same shards in another directory: the rest of the epoch, exactly.
  std::filesystem::copy(tmp.path("a"), tmp.path("copy"));
  Options copied = o;
  copied.source = tmp.path("copy");
  Loader again(copied);
  std::vector<std::uint64_t> rest;
  for (Batch& b : again.epoch(state)) rest.insert(rest.end(), b.indices().begin(), b.indices().end());
  std::set<std::uint64_t> seen(first.begin(), first.end());
  seen.insert(rest.begin(), rest.end());
  EXPECT_EQ(first.size() + rest.size(), 100u);
  EXPECT_EQ(seen.size(), 100u);
  // The same samples cut into other shards: another dataset as far as the order goes.
  const ShardFiles other = write_shards(tmp, "b", {65, 35});
  Options elsewhere = o;
  elsewhere.source = tmp.path("b");
  Loader b(elsewhere);
  expect_error(ErrorCode::state_mismatch, [&] { b.epoch(state); }, {"shards '3 shards ", "' in the state, '2 shards "});
}

}  // namespace
}  // namespace stoker::test
