// The holds of the node's cache (remote/shard_cache.h) between processes: a shard another process
// holds is not deleted by an eviction, and a process forked while this one held a shard (a
// DataLoader worker, a multiprocessing child) keeps neither the hold nor the eviction's lock. What
// a cached file's record (remote/cache_record.h) lets through after a reboot. And the room a
// partial download needs.
#include "remote/shard_cache.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <utility>

#include "base/unique_fd.h"
#include "remote/cache_record.h"
#include "remote/content_digest.h"
#include "tests/remote/remote_fixtures.h"
#include "tests/support/run_process.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

std::uint64_t digest_of(const std::string& bytes) {
  remote::ContentDigest digest;
  digest.add(bytes.data(), bytes.size());
  return digest.value();
}

// The record of the cache file `path`.
std::optional<remote::CacheRecord> record_of(const std::string& path) {
  const detail::UniqueFd fd(::open((path + ".lock").c_str(), O_RDONLY | O_CLOEXEC));
  return fd ? remote::read_record(fd.get()) : std::nullopt;
}

void write_record_of(const std::string& path, const remote::CacheRecord& record) {
  const detail::UniqueFd fd(::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd);
  remote::write_record(fd.get(), record, path + ".lock");
}

// A shard already whole in the cache at `dir` (its record written by `boot`; none where it is
// nullopt), its bytes `bytes`, though its object's are "12345": held without a fetch (the URL is
// never asked, and answers nothing) where the cache trusts it.
struct CachedShard {
  explicit CachedShard(const std::string& dir, std::optional<std::string> boot = remote::this_boot(),
                       const std::string& bytes = "12345")
      : object{"http://127.0.0.1:9/a.h5", "http://127.0.0.1:9/a.h5", {}},
        info{5, "e1"},
        path(remote::cached_path(dir, object.url, info)) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << bytes;
    if (boot) write_record_of(path, remote::CacheRecord{*boot, digest_of("12345")});
  }
  remote::HeldObject hold(remote::FetchCounters& counters) const {
    remote::FetchPolicy quick;
    quick.timeout = std::chrono::milliseconds(300);
    quick.first_backoff = std::chrono::milliseconds(50);
    return remote::hold_object(object, info, path, quick, counters);
  }
  remote::RemoteObject object;
  remote::ObjectInfo info;
  std::string path;
};

// Whether another process could take the lock `op` of `path` now (a descriptor of its own).
bool could_lock(const std::string& path, int op) {
  const detail::UniqueFd fd(::open((path + ".lock").c_str(), O_RDWR | O_CLOEXEC));
  return fd && ::flock(fd.get(), op | LOCK_NB) == 0;
}

// A child forked now that sleeps until killed, with the parent's descriptors.
struct SleepingChild {
  SleepingChild() : pid(::fork()) {
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      ::pause();
      ::_exit(0);
    }
  }
  ~SleepingChild() {
    ::kill(pid, SIGKILL);  // pid > 0: never kill(-1)
    ::waitpid(pid, nullptr, 0);
  }
  pid_t pid;
};

TEST(ShardCache, AShardAnotherProcessHoldsIsKeptByAnEviction) {
  TempDir tmp;
  const CachedShard shard(tmp.path("cache"));
  remote::FetchCounters counters;
  remote::HeldObject mine = shard.hold(counters);
  remote::HeldObject theirs = shard.hold(counters);  // a descriptor of its own, as another rank's
  EXPECT_EQ(counters.cache_hits, 2u);
  EXPECT_EQ(counters.downloads, 0u);
  EXPECT_FALSE(remote::evict(std::move(mine)));
  EXPECT_TRUE(std::filesystem::exists(shard.path));
  EXPECT_TRUE(remote::evict(std::move(theirs)));  // the last holder deletes it
  EXPECT_FALSE(std::filesystem::exists(shard.path));
}

TEST(ShardCache, AForkedProcessKeepsNeitherTheHoldNorTheEvictionsLock) {
  TempDir tmp;
  const CachedShard shard(tmp.path("cache"));
  remote::FetchCounters counters;
  {
    remote::HeldObject held = shard.hold(counters);
    const SleepingChild child;  // shares the held descriptor's open file
    EXPECT_FALSE(could_lock(shard.path, LOCK_EX));
    held = remote::HeldObject();  // let go of
    EXPECT_TRUE(could_lock(shard.path, LOCK_EX)) << "the fork keeps the hold";
  }
  remote::HeldObject held = shard.hold(counters);
  const SleepingChild child;
  EXPECT_TRUE(remote::evict(std::move(held)));
  EXPECT_FALSE(std::filesystem::exists(shard.path));
  // The next process to want it takes the lock (and fetches it again), the fork still alive.
  EXPECT_TRUE(could_lock(shard.path, LOCK_SH)) << "the fork keeps the eviction's lock";
}

// A file that another boot wrote without syncing it is read back once: its bytes as its record's
// digest says, it is used (and its record names this boot from then on); other bytes of the same
// size (a power loss wrote back only some), or no record at all, and it is fetched again.
TEST(ShardCache, AFileAnotherBootWroteIsUsedOnlyWhenItsBytesMatchItsDigest) {
  TempDir tmp;
  ASSERT_FALSE(remote::this_boot().empty()) << "/proc/sys/kernel/random/boot_id names this boot";
  {
    const CachedShard shard(tmp.path("intact"), "another-boot");
    EXPECT_TRUE(remote::is_cached(shard.path, 5));
    EXPECT_EQ(record_of(shard.path), (remote::CacheRecord{remote::this_boot(), digest_of("12345")}));
    remote::FetchCounters counters;
    EXPECT_TRUE(shard.hold(counters));
    EXPECT_EQ(counters.cache_hits, 1u);
  }
  for (const auto& [dir, boot] :
       {std::pair<std::string, std::optional<std::string>>{"zeros", "another-boot"}, {"no-record", std::nullopt}}) {
    const CachedShard shard(tmp.path(dir), boot,
                            dir == "zeros" ? std::string("12\0\0"
                                                         "5",
                                                         5)
                                           : "12345");
    EXPECT_FALSE(remote::is_cached(shard.path, 5)) << dir;
    remote::FetchCounters counters;
    try {
      (void)shard.hold(counters);
      ADD_FAILURE() << dir << ": held without a fetch";
    } catch (const Error& e) {  // fetched again, from a URL that answers nothing
      EXPECT_THAT(e.what(), testing::HasSubstr("http://127.0.0.1:9/a.h5")) << dir;
    }
    EXPECT_EQ(counters.cache_hits, 0u) << dir;
  }
  // The same boot's page cache is trusted: its record is enough (the check reads nothing).
  const CachedShard shard(tmp.path("this-boot"));
  EXPECT_TRUE(remote::is_cached(shard.path, 5));
  EXPECT_FALSE(remote::is_cached(shard.path, 6)) << "another size";
}

// A partial download is resumed only in the boot that wrote it: one another boot left may hold
// zeros where its bytes were never written back, and is started over. The file a fetch replaces
// goes first, so that the record, rewritten when the fetch ends, never vouches for it.
TEST(ShardCache, APartialIsResumedOnlyInTheBootThatWroteIt) {
  TempDir tmp;
  const std::string path = tmp.path("a.h5");
  for (const std::string& boot : {std::string("another-boot"), remote::this_boot()}) {
    std::ofstream(path + ".partial") << "123";
    std::ofstream(path) << "12\0\0"
                           "5";  // a copy that failed its check: never vouched for
    write_record_of(path, remote::CacheRecord{boot, std::nullopt});
    const detail::UniqueFd lock(::open((path + ".lock").c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(lock);
    remote::start_partial(path, path + ".partial", lock.get());
    EXPECT_EQ(std::filesystem::exists(path + ".partial"), boot == remote::this_boot()) << boot;
    EXPECT_FALSE(std::filesystem::exists(path)) << boot;
    EXPECT_EQ(record_of(path), (remote::CacheRecord{remote::this_boot(), std::nullopt}));
  }
}

// A download stopped halfway (a run stopped or killed) is resumed on a disk with room for its rest
// though not for the whole object: the room asked for is what the partial does not hold yet.
TEST(ShardCache, APartialOnANearlyFullDiskNeedsRoomOnlyForItsRest) {
  TempDir tmp;
  const std::string bytes = write_big_object(tmp, "served");
  FaultServer server(tmp, tmp.path("served"), R"({"big.bin": ["stall:2097152:5"]})");
  const std::string disk = tmp.path("disk");
  const int rc = with_small_tmpfs(disk, 4u << 20, [&] {
    const std::vector<remote::ListedObject> objects{
        {remote::RemoteObject{server.url("big.bin"), server.url("big.bin"), {}}, remote::ObjectInfo{bytes.size(), ""}}};
    remote::CacheOptions o;
    o.dir = disk + "/cache";
    o.policy = quick_policy();
    remote::FetchCounters counters;
    o.keep_going = [&] { return counters.bytes < (2u << 20); };  // stopped in the pause after 2 MiB
    const Caught stopped = caught([&] { remote::cache_objects(objects, o, counters); });
    if (stopped.code != ErrorCode::interrupted) {
      std::fprintf(stderr, "the first run: %s\n", stopped.message.c_str());
      return 1;
    }
    // 2 MiB of the 4 are free: not enough for the object, enough for its rest.
    o.keep_going = {};
    const std::vector<std::string> paths = remote::cache_objects(objects, o, counters);
    return file_bytes(paths.at(0)) == bytes ? 0 : 2;
  });
  if (rc == 77) GTEST_SKIP() << "no mount namespace for a small tmpfs here";
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(server.log(), "GET big.bin -\nGET big.bin bytes=2097152-\n");
}

}  // namespace
}  // namespace stoker::test
