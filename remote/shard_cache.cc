#include "remote/shard_cache.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "base/unique_fd.h"
#include "remote/cache_record.h"
#include "remote/partial_file.h"
#include "remote/remote_url.h"
#include "stoker/error.h"

namespace stoker::remote {
namespace {

// The error to report of those the jobs threw: the first by k that is not a stop the others met
// because of it.
std::exception_ptr first_cause(const std::vector<std::exception_ptr>& errors) {
  std::exception_ptr first;
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Error& stopped) {
      if (stopped.code() != ErrorCode::interrupted) return e;
    } catch (...) {
      return e;
    }
    if (!first) first = e;
  }
  return first;
}

// Runs job(k) for k < n on `threads` threads, while the calling thread asks keep_going every 50 ms.
// A job that throws, or keep_going's false (or exception), sets `stop`: no job starts after it,
// and those running stop (FetchPolicy::stop). Throws what stopped them once every thread ended.
void in_parallel(std::size_t n, std::size_t threads, const std::function<void(std::size_t)>& job,
                 const std::function<bool()>& keep_going, std::atomic<bool>& stop) {
  std::atomic<std::size_t> next{0};
  std::vector<std::exception_ptr> errors(n);
  std::mutex m;
  std::condition_variable ended;
  std::size_t running = 0;
  auto run = [&] {
    for (std::size_t k; !stop && (k = next++) < n;) {
      try {
        job(k);
      } catch (...) {
        errors[k] = std::current_exception();
        stop = true;
      }
    }
    std::lock_guard lock(m);
    --running;
    ended.notify_all();
  };
  std::vector<std::thread> pool;
  std::exception_ptr why;
  {
    std::unique_lock lock(m);
    try {
      for (std::size_t t = 0; t < std::min(threads, n); ++t) {
        pool.emplace_back(run);
        ++running;
      }
    } catch (...) {  // no thread to start: those started stop, and are joined below
      stop = true;
      why = std::current_exception();
    }
    while (!ended.wait_for(lock, std::chrono::milliseconds(50), [&] { return running == 0; })) {
      if (!keep_going || why) continue;
      lock.unlock();
      try {
        if (!keep_going())
          why = std::make_exception_ptr(Error(ErrorCode::interrupted, "fetching remote shards was interrupted"));
      } catch (...) {
        why = std::current_exception();
      }
      if (why) stop = true;
      lock.lock();
    }
  }
  for (auto& t : pool) t.join();
  if (why) std::rethrow_exception(why);
  if (const std::exception_ptr e = first_cause(errors)) std::rethrow_exception(e);
}

// "<XXH64 of the URL>-<XXH64 of size and ETag>/<file name>": a directory per object version, and
// the object under its own file name (which a shard set's identity, and so a saved state, goes by).
std::string cache_name(const std::string& url, const ObjectInfo& info) {
  const std::string version = fmt::format("{}|{}", info.size, info.etag);
  return fmt::format("{:016x}-{:016x}/{}", XXH64(url.data(), url.size(), 0), XXH64(version.data(), version.size(), 0),
                     url_file_name(url));
}

// Takes the flock `op` (LOCK_SH or LOCK_EX) of `lock`, waiting for other processes (another rank
// fetching the object), stoppable by policy.stop.
void take_lock(int lock, int op, const std::string& lock_path, const RemoteObject& object, const FetchPolicy& policy) {
  while (::flock(lock, op | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) throw Error::from_errno(errno, "locking " + lock_path);
    if (policy.stop && policy.stop->load())
      throw Error(ErrorCode::interrupted, fmt::format("{}: its fetch was stopped", object.name));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

detail::UniqueFd open_lock(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) throw Error(ErrorCode::io, fmt::format("{}: cannot create its directory ({})", path, ec.message()));
  const std::string lock_path = path + ".lock";
  detail::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock) throw Error::from_errno(errno, lock_path);
  return lock;
}

// The object in the cache at `path`, fetched under the exclusive lock `lock` (taken here) unless
// another process already did.
void fetch_locked(int lock, const RemoteObject& object, const ObjectInfo& info, const std::string& path,
                  const FetchPolicy& policy, FetchCounters& counters) {
  take_lock(lock, LOCK_EX, path + ".lock", object, policy);
  if (complete(path, info.size, lock)) {  // another process fetched it while this one waited
    ++counters.cache_hits;
    return;
  }
  const std::string partial = path + ".partial";
  start_partial(path, partial, lock);
  const std::uint64_t digest = fetch_object(object, info, partial, policy, counters);
  name_complete(partial, path, digest, lock);
}

void fetch_into(const RemoteObject& object, const ObjectInfo& info, const std::string& path, const FetchPolicy& policy,
                FetchCounters& counters) {
  const detail::UniqueFd lock = open_lock(path);
  fetch_locked(lock.get(), object, info, path, policy, counters);
}

void check_room(const std::vector<ObjectInfo>& infos, const std::vector<std::string>& paths,
                const std::vector<bool>& cached, const CacheOptions& o) {
  std::uint64_t missing = 0;
  std::size_t missing_count = 0;
  for (std::size_t k = 0; k < infos.size(); ++k) {
    if (cached[k]) continue;
    missing += infos[k].size - std::min(infos[k].size, allocated_bytes(paths[k] + ".partial"));
    ++missing_count;
  }
  if (const std::uint64_t free_bytes = free_bytes_of(o.dir); missing > free_bytes) {
    throw Error(ErrorCode::io,
                fmt::format("{}: needs {} for the {} shard{} not yet cached, and its disk has {} free: free some, "
                            "or point {} at a larger disk",
                            o.dir, detail::format_bytes(missing), missing_count, missing_count == 1 ? "" : "s",
                            detail::format_bytes(free_bytes), detail::option_name("cache_dir")));
  }
}

}  // namespace

std::string default_cache_dir() {
  if (const char* d = std::getenv("STOKER_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/stoker/shards";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/stoker/shards";
  return "/tmp/stoker-shards";
}

std::uint64_t free_bytes_of(const std::string& dir) {
  struct statvfs fs {};
  if (::statvfs(dir.c_str(), &fs) != 0) throw Error::from_errno(errno, dir);
  return std::uint64_t{fs.f_bavail} * fs.f_frsize;
}

void for_each_object(std::size_t n, const CacheOptions& o,
                     const std::function<void(std::size_t, const FetchPolicy&)>& job) {
  std::atomic<bool> stop{false};
  FetchPolicy policy = o.policy;
  policy.stop = &stop;
  in_parallel(
      n, std::max<std::size_t>(1, o.parallelism), [&](std::size_t k) { job(k, policy); }, o.keep_going, stop);
}

std::vector<ObjectInfo> object_infos(const std::vector<ListedObject>& objects, const CacheOptions& o,
                                     FetchCounters& counters) {
  std::vector<ObjectInfo> infos(objects.size());
  for_each_object(objects.size(), o, [&](std::size_t k, const FetchPolicy& policy) {
    infos[k] = objects[k].info ? *objects[k].info : stat_object(objects[k].object, policy, counters);
  });
  return infos;
}

std::string cached_path(const std::string& dir, const std::string& url, const ObjectInfo& info) {
  return (std::filesystem::path(dir) / cache_name(url, info)).string();
}

HeldObject hold_object(const RemoteObject& object, const ObjectInfo& info, const std::string& path,
                       const FetchPolicy& policy, FetchCounters& counters) {
  detail::UniqueFd lock = open_lock(path);
  for (;;) {
    // Shared while it is complete: a process that holds it keeps it from being evicted. A file
    // that is not there is fetched under the exclusive lock, which is then made shared; one
    // evicted by another process between the two (it held it too) is fetched again.
    take_lock(lock.get(), LOCK_SH, path + ".lock", object, policy);
    if (complete(path, info.size, lock.get())) {
      ++counters.cache_hits;
      return HeldObject(std::move(lock), path);
    }
    if (::flock(lock.get(), LOCK_UN) != 0) throw Error::from_errno(errno, "unlocking " + path + ".lock");
    fetch_locked(lock.get(), object, info, path, policy, counters);
    if (::flock(lock.get(), LOCK_SH) != 0) throw Error::from_errno(errno, "locking " + path + ".lock");
    if (complete(path, info.size, lock.get())) return HeldObject(std::move(lock), path);
    if (::flock(lock.get(), LOCK_UN) != 0) throw Error::from_errno(errno, "unlocking " + path + ".lock");
  }
}

std::vector<HeldObject> hold_objects(const std::vector<RemoteObject>& objects, const std::vector<ObjectInfo>& infos,
                                     const std::vector<std::string>& paths, const CacheOptions& o,
                                     FetchCounters& counters) {
  std::vector<HeldObject> held(objects.size());
  for_each_object(objects.size(), o, [&](std::size_t k, const FetchPolicy& policy) {
    held[k] = hold_object(objects[k], infos[k], paths[k], policy, counters);
  });
  return held;
}

std::optional<std::uint64_t> HeldObject::digest() const {
  if (!lock_) return std::nullopt;
  const std::optional<CacheRecord> record = read_record(lock_.get());
  return record ? record->digest : std::nullopt;
}

void HeldObject::release() noexcept {
  if (lock_) (void)::flock(lock_.get(), LOCK_UN);  // fails only for a bad descriptor
  lock_.reset();
}

std::optional<HeldObject> try_hold(const std::string& path, std::optional<std::uint64_t> size) {
  detail::UniqueFd lock(::open((path + ".lock").c_str(), O_RDWR | O_CLOEXEC));
  if (!lock || ::flock(lock.get(), LOCK_SH | LOCK_NB) != 0) return std::nullopt;
  const int fd = lock.get();
  HeldObject held(std::move(lock), path);  // unlocked when it goes, whatever follows
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (size && static_cast<std::uint64_t>(st.st_size) != *size) ||
      !complete(path, static_cast<std::uint64_t>(st.st_size), fd))
    return std::nullopt;
  return held;
}

bool evict(HeldObject held) {
  if (!held) return false;
  const std::string path = held.path_;
  held.release();
  // Exclusive, on a descriptor of its own (never shared with a fork), only when no other process
  // holds it: then no one reads it, and no one will before it is gone (a process that wants it
  // again takes the lock first, and finds it missing).
  const std::string lock_path = path + ".lock";
  const detail::UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CLOEXEC));
  if (!lock || ::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) return false;
  const bool deleted = ::unlink(path.c_str()) == 0;
  (void)::flock(lock.get(), LOCK_UN);
  return deleted;
}

void prepare_cache_dir(const CacheOptions& o, std::uint64_t needed) {
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (ec) {
    throw Error(ErrorCode::io, fmt::format("{}: cannot create the cache directory ({}): set {} to a writable one",
                                           o.dir, ec.message(), detail::option_name("cache_dir")));
  }
  if (::access(o.dir.c_str(), W_OK) != 0) {
    throw Error::from_errno(errno, fmt::format("{}: the cache directory is not writable; set {} to a writable one",
                                               o.dir, detail::option_name("cache_dir")));
  }
  if (needed == 0) return;
  if (const std::uint64_t free_bytes = free_bytes_of(o.dir); needed > free_bytes) {
    throw Error(ErrorCode::io,
                fmt::format("{}: needs {} for the shards it holds at once ({} {}), and its disk has {} free: free "
                            "some, lower {}, or point {} at a larger disk",
                            o.dir, detail::format_bytes(needed), detail::option_name("cache_limit"),
                            detail::format_bytes(o.limit), detail::format_bytes(free_bytes),
                            detail::option_name("cache_limit"), detail::option_name("cache_dir")));
  }
}

bool is_cached(const std::string& path, std::uint64_t size) { return complete(path, size); }

std::vector<std::string> cache_objects(const std::vector<ListedObject>& objects, const CacheOptions& o,
                                       FetchCounters& counters) {
  const FetchTime timed(counters);  // the time spent here, however it ends
  prepare_cache_dir(o, 0);
  const std::size_t n = objects.size();
  const std::vector<ObjectInfo> infos = object_infos(objects, o, counters);
  std::vector<std::string> paths(n);
  std::vector<bool> cached(n);
  for (std::size_t k = 0; k < n; ++k) {
    paths[k] = cached_path(o.dir, objects[k].object.url, infos[k]);
    cached[k] = complete(paths[k], infos[k].size);
  }
  check_room(infos, paths, cached, o);
  std::vector<std::size_t> missing;
  for (std::size_t k = 0; k < n; ++k) cached[k] ? void(++counters.cache_hits) : missing.push_back(k);
  for_each_object(missing.size(), o, [&](std::size_t m, const FetchPolicy& policy) {
    const std::size_t k = missing[m];
    fetch_into(objects[k].object, infos[k], paths[k], policy, counters);
  });
  return paths;
}

}  // namespace stoker::remote
