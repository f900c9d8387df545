// The holds of the node's cache (remote/shard_cache.h) between processes: a shard another process
// holds is not deleted by an eviction, and a process forked while this one held a shard (a
// DataLoader worker, a multiprocessing child) keeps neither the hold nor the eviction's lock.
#include "remote/shard_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "base/unique_fd.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

// A shard already whole in the cache at `dir`: held without a fetch (the URL is never asked).
struct CachedShard {
  explicit CachedShard(const std::string& dir)
      : object{"http://127.0.0.1:9/a.h5", "http://127.0.0.1:9/a.h5", {}},
        info{5, "e1"},
        path(remote::cached_path(dir, object.url, info)) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << "12345";
  }
  remote::HeldObject hold(remote::FetchCounters& counters) const {
    return remote::hold_object(object, info, path, remote::FetchPolicy{}, counters);
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

}  // namespace
}  // namespace stoker::test
