// Remote shards over HTTP, against a real server the test starts on 127.0.0.1 (tests/remote/
// fault_server.py) that serves Range requests and ETags and misbehaves on request: an epoch read
// through the node's cache equals the local one's, a second loader finds the cache, broken
// transfers resume by Range, 5xx and SlowDown are retried, and what cannot be fetched is an error
// naming the URL and the last answer, with nothing half-downloaded left under a shard's name.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "base/unique_fd.h"
#include "formats/hdf5/hdf5_writer.h"
#include "loader/plan/shard_schedule.h"
#include "remote/cache_record.h"
#include "stoker/loader.h"
#include "tests/remote/remote_fixtures.h"
#include "tests/support/run_process.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(RemoteShards, AnEpochThroughTheCacheEqualsTheLocalOneAndTheNextLoaderFindsItThere) {
  TempDir tmp;
  write_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  Loader first(remote_options(tmp, server));
  EXPECT_EQ(epoch_bytes(first), local_epoch(tmp));
  const Stats s = first.stats();
  EXPECT_EQ(s.downloads, 3u);
  EXPECT_EQ(s.cache_hits, 0u);
  EXPECT_GT(s.fetch_seconds, 0.0);
  EXPECT_THAT(s.verdict, HasSubstr("; before the first batch, "));
  EXPECT_THAT(s.verdict, HasSubstr(" s went to fetching 3 remote shards ("));
  EXPECT_EQ(s.download_bytes, std::filesystem::file_size(tmp.path("served/train-0.h5")) +
                                  std::filesystem::file_size(tmp.path("served/train-1.h5")) +
                                  std::filesystem::file_size(tmp.path("served/train-2.h5")));
  // A second loader on the node (another rank, the next run): nothing fetched again.
  Loader second(remote_options(tmp, server, 0));
  EXPECT_EQ(second.stats().downloads, 0u);
  EXPECT_EQ(second.stats().cache_hits, 3u);
  EXPECT_EQ(epoch_bytes(second), local_epoch(tmp));
  // The cache holds the three shards under their versions' names, and no partial file.
  std::size_t shards = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp.path("cache"))) {
    EXPECT_THAT(e.path().string(), Not(HasSubstr(".partial")));
    if (e.path().extension() == ".h5") ++shards;
  }
  EXPECT_EQ(shards, 3u);
  // Cached under their own names, the shards are the local set's to a saved state: either resumes
  // the other's.
  Options local;
  local.source = tmp.path("served/train-*.h5");
  local.batch_size = 9;
  local.shuffle = true;
  local.seed = 5;
  EXPECT_EQ(Loader(local).state().shards, second.state().shards);
}

// After a reboot (a record written by another boot), the cached shards are read back once: those
// whose bytes match their digest are used, one that a power loss left with zeros is fetched again,
// and the epoch is the local one.
TEST(RemoteShards, AfterARebootACachedShardWhoseBytesChangedIsFetchedAgain) {
  TempDir tmp;
  write_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  EXPECT_EQ(Loader(remote_options(tmp, server, 0)).stats().downloads, 3u);
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp.path("cache"))) {
    if (e.path().extension() != ".h5") continue;
    const std::string path = e.path().string();
    const detail::UniqueFd lock(::open((path + ".lock").c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(lock);
    std::optional<remote::CacheRecord> record = remote::read_record(lock.get());
    ASSERT_TRUE(record && record->boot == remote::this_boot() && record->digest) << path;
    record->boot = "another-boot";
    remote::write_record(lock.get(), *record, path + ".lock");
    if (e.path().filename() == "train-1.h5") {  // bytes in its middle lost: what the disk holds there now
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      std::string middle(512, '\0');
      f.seekg(static_cast<std::streamoff>(e.file_size() / 2));
      f.read(middle.data(), 512);
      for (char& c : middle) c = static_cast<char>(~c);
      f.seekp(static_cast<std::streamoff>(e.file_size() / 2));
      f.write(middle.data(), 512);
      ASSERT_TRUE(f.good()) << path;
    }
  }
  Loader after(remote_options(tmp, server));
  EXPECT_EQ(after.stats().downloads, 1u);
  EXPECT_EQ(after.stats().cache_hits, 2u);
  EXPECT_EQ(epoch_bytes(after), local_epoch(tmp));
}

TEST(RemoteShards, ResetsMidBodyResumeByRangeAndServerErrorsAreRetried) {
  TempDir tmp;
  write_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"),
                     R"({"train-1.h5": ["ok", "reset:2000"], "train-2.h5": ["status:500", "slowdown"]})");
  Options o = remote_options(tmp, server);
  o.fetch_parallelism = 1;  // the stat's requests first, then each fetch: the faults meet the bodies
  Loader loader(o);
  EXPECT_EQ(epoch_bytes(loader), local_epoch(tmp));
  const Stats s = loader.stats();
  EXPECT_EQ(s.downloads, 3u);
  EXPECT_GE(s.fetch_retries, 3u);
  // train-1's fetch was reset after 2000 bytes: it went on from there.
  EXPECT_THAT(server.log(), HasSubstr("GET train-1.h5 bytes=2000-"));
}

// The fetch timeout bounds the time without progress, not a download's: a transfer that moved for
// longer than it and then broke is resumed.
TEST(RemoteShards, ATransferThatMovedLongerThanTheTimeoutAndBrokeIsResumed) {
  TempDir tmp;
  write_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"), R"({"train-1.h5": ["ok", "stall:2000:1.5"]})");
  Options o = remote_options(tmp, server);
  o.fetch_timeout = std::chrono::seconds(1);
  Loader loader(o);
  EXPECT_EQ(epoch_bytes(loader), local_epoch(tmp));
  EXPECT_THAT(server.log(), HasSubstr("GET train-1.h5 bytes=2000-"));
}

// A build that fetches stops when its caller says so (Python's Ctrl-C), every fetch with it.
TEST(RemoteShards, FetchingStopsWhenTheCallerSaysSo) {
  TempDir tmp;
  write_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"), R"({"train-2.h5": ["always:503"]})");
  Options o = remote_options(tmp, server);
  o.fetch_timeout = std::chrono::minutes(10);
  const auto start = std::chrono::steady_clock::now();
  auto keep_going = [&] { return std::chrono::steady_clock::now() - start < std::chrono::milliseconds(300); };
  expect_error(ErrorCode::interrupted, [&] { Loader l(o, keep_going); }, {"interrupted"});
}

TEST(RemoteShards, AServerDownPastTheTimeoutIsAnErrorNamingTheUrlAndTheLastAnswer) {
  TempDir tmp;
  write_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"), R"({"train-2.h5": ["always:503"]})");
  Options o = remote_options(tmp, server);
  o.fetch_timeout = std::chrono::milliseconds(1500);
  expect_error(
      ErrorCode::io, [&] { Loader l(o); },
      {server.url("train-2.h5") + ": no complete answer within the fetch timeout of 1.5 s", "the last: HTTP 503"});
  FaultServer slow(tmp, tmp.path("served"), R"({"train-0.h5": ["slowdown", "slowdown", "slowdown", "slowdown"]})");
  Options s = remote_options(tmp, slow);
  s.fetch_timeout = std::chrono::milliseconds(400);
  expect_error(ErrorCode::io, [&] { Loader l(s); }, {"the last: HTTP 503 (SlowDown)"});
}

TEST(RemoteShards, AShardChangedSinceItWasListedOrMissingIsRefusedAndNothingHalfDownloadedIsKept) {
  TempDir tmp;
  write_shards(tmp, "served");
  {
    // The stat sees one version, the fetch another.
    FaultServer server(tmp, tmp.path("served"), R"({"train-1.h5": ["ok", "newversion"]})");
    Options o = remote_options(tmp, server);
    o.fetch_parallelism = 1;
    expect_error(ErrorCode::dataset, [&] { Loader l(o); },
                 {server.url("train-1.h5") + ": changed since it was listed (ETag ", "-new now)"});
  }
  std::size_t seen = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp.path("cache"))) {
    EXPECT_FALSE(e.path().string().ends_with("train-1.h5")) << "a shard's name holds what was not verified";
    seen += e.path().string().ends_with("train-0.h5");
  }
  EXPECT_EQ(seen, 1u);  // the listing looked where the files are
  FaultServer server(tmp, tmp.path("served"));
  Options missing = remote_options(tmp, server);
  missing.source = server.url("train-{0..3}.h5");
  expect_error(ErrorCode::dataset, [&] { Loader l(missing); },
               {server.url("train-3.h5") + ": the server answered HTTP 404"});
}

TEST(RemoteShards, ACacheThatCannotHoldOneShardIsAnErrorSayingHowLarge) {
  TempDir tmp;
  write_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  Options o = remote_options(tmp, server);
  o.cache_limit = 1000;
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); },
               {tmp.path("cache") + ": Options::cache_limit is 1000 B, and shard ", "alone takes",
                ": the cache must hold a shard at least"});
}

// Sixteen shards of 30 samples in chunks of 10: the quasi-random order reads them in groups of 10,
// four groups at a time, eight shards by turns, so that a batch reads a few of them and a stretch of
// the epoch half of them.
constexpr std::uint32_t kShards = 16;
void write_chunked_shards(const TempDir& tmp, const std::string& dir) {
  std::filesystem::create_directories(tmp.path(dir));
  formats::Hdf5WriteOptions chunks;
  chunks.rows_per_chunk = 10;
  for (std::uint32_t k = 0; k < kShards; ++k)
    write_hdf5(tmp.path(fmt::format("{}/train-{}.h5", dir, k)), small_schema(30), chunks);
}

Options quasi_random_options(const std::string& source) {
  Options o;
  o.source = source;
  o.batch_size = 3;
  o.order = Order::quasi_random;
  o.seed = 5;
  o.num_workers = 2;
  o.fetch_timeout = std::chrono::seconds(20);
  return o;
}

// An epoch's bytes, and the shards each of its batches reads.
struct ReadEpoch {
  std::vector<std::vector<std::byte>> bytes;
  detail::BatchShards reads;
};
ReadEpoch read_epoch(Loader& loader, std::uint64_t epoch) {
  ReadEpoch out;
  out.reads.begin.push_back(0);
  for (Batch& b : loader.epoch(epoch)) {
    std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(b.indices().data()),
                                 reinterpret_cast<const std::byte*>(b.indices().data() + b.size()));
    for (const FieldView& f : b.fields()) bytes.insert(bytes.end(), f.data, f.data + f.bytes);
    out.bytes.push_back(std::move(bytes));
    std::set<std::uint32_t> shards;
    for (std::uint64_t i : b.indices()) shards.insert(static_cast<std::uint32_t>(i / 30));
    out.reads.shards.insert(out.reads.shards.end(), shards.begin(), shards.end());
    out.reads.begin.push_back(out.reads.shards.size());
  }
  return out;
}

std::size_t cached_shard_files(const std::string& cache) {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(cache)) n += e.path().extension() == ".h5";
  return n;
}

TEST(RemoteShards, ASetLargerThanTheCacheIsReadThroughItWithBeladysFetches) {
  TempDir tmp;
  write_chunked_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  Loader local(quasi_random_options(tmp.path("served/train-*.h5")));
  const ReadEpoch want = read_epoch(local, 0), want1 = read_epoch(local, 1);
  // A cache of a quarter of the set, or of what the busiest batch reads.
  std::size_t capacity = kShards / 4;
  for (std::uint64_t b = 0; b < want.reads.end(); ++b) capacity = std::max(capacity, want.reads.of(b).size());
  ASSERT_LT(capacity, kShards);
  const std::uint64_t shard_bytes = std::filesystem::file_size(tmp.path("served/train-0.h5"));
  Options o = quasi_random_options(server.url("train-{0..15}.h5"));
  o.cache_dir = tmp.path("cache");
  o.cache_limit = capacity * shard_bytes + shard_bytes / 2;
  SCOPED_TRACE(::testing::Message() << "a cache of " << capacity << " shards");

  o.trace = tmp.path("trace.json");
  auto remote = std::make_unique<Loader>(o);
  // Reading the set fetched each shard once, `capacity` at a time; the last of them stay.
  Stats s = remote->stats();
  const std::uint32_t last = (kShards - 1) / capacity * capacity;
  EXPECT_EQ(s.downloads, kShards);
  EXPECT_EQ(s.evictions, last);
  std::vector<std::uint32_t> cached;
  for (std::uint32_t k = last; k < kShards; ++k) cached.push_back(k);

  const ReadEpoch got = read_epoch(*remote, 0);
  EXPECT_EQ(got.bytes, want.bytes);
  const detail::ShardSchedule belady = detail::belady_schedule(want.reads, capacity, cached);
  const Stats e0 = remote->stats();
  EXPECT_EQ(e0.downloads - s.downloads, belady.steps.size());
  EXPECT_EQ(e0.evictions - s.evictions, belady.steps.size() - (capacity - cached.size()));
  EXPECT_GT(detail::lru_fetches(want.reads, capacity, cached), belady.steps.size());  // 28 against 22
  EXPECT_LE(cached_shard_files(tmp.path("cache")), capacity);
  // The next epoch goes on from what the cache holds.
  EXPECT_EQ(read_epoch(*remote, 1).bytes, want1.bytes);
  const detail::ShardSchedule belady1 = detail::belady_schedule(want1.reads, capacity, belady.cached_at_end);
  EXPECT_EQ(remote->stats().downloads - e0.downloads, belady1.steps.size());
  EXPECT_LE(cached_shard_files(tmp.path("cache")), capacity);
  remote.reset();
  // The trace shows each fetch on a track of its own.
  std::ifstream trace_file(tmp.path("trace.json"));
  const std::string trace((std::istreambuf_iterator<char>(trace_file)), std::istreambuf_iterator<char>());
  EXPECT_THAT(trace, HasSubstr(R"("args":{"name":"remote fetches 0"})"));
  std::size_t fetch_spans = 0;
  for (std::size_t at = 0; (at = trace.find(R"("name":"fetch")", at)) != std::string::npos; ++at) ++fetch_spans;
  EXPECT_EQ(fetch_spans, belady.steps.size() + belady1.steps.size());

  // A second loader on the node learns the set from the first's memo: nothing is fetched before
  // its first batch, it starts with the shards the first left in the cache, and its epoch is the
  // same, with Belady's fetches from there.
  Options inline_reads = o;
  inline_reads.num_workers = 0;
  inline_reads.trace.clear();
  Loader again(inline_reads);
  EXPECT_EQ(again.stats().downloads, 0u);
  EXPECT_EQ(again.stats().cache_hits, capacity);
  const ReadEpoch again0 = read_epoch(again, 0);
  EXPECT_EQ(again0.bytes, want.bytes);
  EXPECT_EQ(again.stats().downloads, detail::belady_schedule(want.reads, capacity, belady1.cached_at_end).steps.size());
}

TEST(RemoteShards, ABatchThatReadsMoreShardsThanTheCacheHoldsIsAnErrorSayingWhatToDo) {
  TempDir tmp;
  write_chunked_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  Options o = quasi_random_options(server.url("train-{0..15}.h5"));
  o.order = Order::random;  // every batch reads most shards
  o.cache_dir = tmp.path("cache");
  o.cache_limit = 2 * std::filesystem::file_size(tmp.path("served/train-0.h5"));
  Loader l(o);
  expect_error(ErrorCode::invalid_option,
               [&] {
                 for (Batch& b : l.epoch(0)) (void)b;
               },
               {"stoker: epoch 0: batch 0 reads ", " shards, and the cache holds 2 at once (Options::cache_limit is ",
                "raise it, or use an order that reads a few shards at a time (Options::order = \"quasi_random\""});
}

TEST(RemoteShards, AShardWhoseFetchFailsMidEpochIsAnErrorNamingItAndTheNextEpochReadsIt) {
  TempDir tmp;
  write_chunked_shards(tmp, "served");
  // Its stat and the fetch that learns the set answer; the epoch's fetch of it does not.
  FaultServer server(tmp, tmp.path("served"), R"({"train-0.h5": ["ok", "ok", "status:404"]})");
  Options o = quasi_random_options(server.url("train-{0..15}.h5"));
  o.cache_dir = tmp.path("cache");
  const std::uint64_t shard_bytes = std::filesystem::file_size(tmp.path("served/train-0.h5"));
  o.cache_limit = 4 * shard_bytes + shard_bytes / 2;
  Loader remote(o);
  expect_error(ErrorCode::dataset,
               [&] {
                 for (Batch& b : remote.epoch(0)) (void)b;
               },
               {server.url("train-0.h5") + ": the server answered HTTP 404"});
  Loader local(quasi_random_options(tmp.path("served/train-*.h5")));
  EXPECT_EQ(read_epoch(remote, 0).bytes, read_epoch(local, 0).bytes);
}

TEST(RemoteShards, LmdbShardsAreReadOneAtATimeThroughACacheOfOne) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.path("served"));
  for (int k = 0; k < 3; ++k) write_lmdb(tmp.path(fmt::format("served/train-{}.lmdb", k)), small_schema(30));
  FaultServer server(tmp, tmp.path("served"));
  Options o;
  o.source = server.url("train-{0..2}.lmdb");
  o.batch_size = 10;  // each batch in one shard
  o.num_workers = 2;
  o.cache_dir = tmp.path("cache");
  std::uint64_t largest = 0;
  for (int k = 0; k < 3; ++k)
    largest = std::max(largest, std::filesystem::file_size(tmp.path(fmt::format("served/train-{}.lmdb", k))));
  o.cache_limit = largest + largest / 2;
  Options local = o;
  local.source = tmp.path("served/train-*.lmdb");
  Loader remote(o), here(local);
  // Each shard was learned alone, and is fetched again after its eviction (another inode): its
  // identity is its size and its transaction, which are the same.
  for (std::uint64_t e = 0; e < 2; ++e) EXPECT_EQ(read_epoch(remote, e).bytes, read_epoch(here, e).bytes);
  EXPECT_EQ(remote.stats().downloads, 3u + 6u);
  std::size_t cached = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(tmp.path("cache")))
    cached += e.path().extension() == ".lmdb";
  EXPECT_EQ(cached, 1u);
}

TEST(RemoteShards, ASmallerCacheNeverDeletesTheShardsOfALoaderThatCachedTheSetWholeAndKeepsToItsLimitAfter) {
  TempDir tmp;
  write_chunked_shards(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  Options whole = quasi_random_options(server.url("train-{0..15}.h5"));
  whole.cache_dir = tmp.path("cache");
  Options small = whole;
  const std::uint64_t shard_bytes = std::filesystem::file_size(tmp.path("served/train-0.h5"));
  small.cache_limit = 4 * shard_bytes + shard_bytes / 2;
  Loader local(quasi_random_options(tmp.path("served/train-*.h5")));
  const ReadEpoch want = read_epoch(local, 0);
  {
    auto cached_whole = std::make_unique<Loader>(whole);  // holds its 16 shards
    Loader through_small(small);
    EXPECT_EQ(read_epoch(through_small, 0).bytes, want.bytes);
    EXPECT_EQ(cached_shard_files(tmp.path("cache")), kShards);  // its evictions deleted none
    EXPECT_EQ(read_epoch(*cached_whole, 0).bytes, want.bytes);
  }
  // Both gone: the next loader with the small cache takes 4 of the 16 left and deletes the rest.
  Loader next(small);
  EXPECT_EQ(next.stats().downloads, 0u);
  EXPECT_EQ(next.stats().evictions, kShards - 4);
  EXPECT_EQ(cached_shard_files(tmp.path("cache")), 4u);
  EXPECT_EQ(read_epoch(next, 0).bytes, want.bytes);
}

TEST(RemoteShards, AMixOfRemoteSourcesIsReadThroughASmallerCacheAsTheLocalMix) {
  TempDir tmp;
  formats::Hdf5WriteOptions chunks;
  chunks.rows_per_chunk = 10;
  std::filesystem::create_directories(tmp.path("served"));
  for (const char* source : {"a", "b"}) {
    for (int k = 0; k < 4; ++k)
      write_hdf5(tmp.path(fmt::format("served/{}-part-{}.h5", source, k)), small_schema(30), chunks);
  }
  FaultServer server(tmp, tmp.path("served"));
  const auto mix = [](const std::string& a, const std::string& b) {
    Options o;
    o.mix = {{a, 3}, {b, 1}};
    o.samples_per_epoch = 200;
    o.batch_size = 4;
    o.num_workers = 2;
    return o;
  };
  Options remote = mix(server.url("a-part-{0..3}.h5"), server.url("b-part-{0..3}.h5"));
  remote.cache_dir = tmp.path("cache");
  const std::uint64_t shard_bytes = std::filesystem::file_size(tmp.path("served/a-part-0.h5"));
  remote.cache_limit = 3 * shard_bytes + shard_bytes / 2;  // 3 of the 8 shards
  Loader through_cache(remote), local(mix(tmp.path("served/a-part-*.h5"), tmp.path("served/b-part-*.h5")));
  const std::uint64_t learned = through_cache.stats().evictions;
  // Two epochs: the mix goes on where it stopped, and its shards are fetched again as its draws
  // come back to them.
  for (std::uint64_t e = 0; e < 2; ++e) EXPECT_EQ(read_epoch(through_cache, e).bytes, read_epoch(local, e).bytes);
  EXPECT_GT(through_cache.stats().evictions, learned);
}

}  // namespace
}  // namespace stoker::test
