// The node's cache of remote shards (Options::cache_dir), shared by every process of every rank on
// the node. Each version of an object is one file named after its URL and its version (size and
// ETag): "<XXH64 of the URL>-<XXH64 of size and ETag>/<file name>" (its own name, which a shard
// set's identity and so a saved state go by). A file of that name is only ever complete and
// verified (its size, and its ETag on every answer): it is written as "NAME.partial" (resumed, by a Range request,
// where an interrupted run left one) and renamed when it holds every byte, under an exclusive flock of "NAME.lock",
// which a second process wanting the same object waits for and then finds the file done. A changed object gets another
// name, so a reader never sees a file change under it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "remote/http_fetch.h"

namespace stoker::remote {

struct CacheOptions {
  std::string dir;              // created when missing
  std::uint64_t limit = 0;      // bytes the set may take in it; 0: what its disk has free
  std::size_t parallelism = 4;  // objects stat'ed or fetched at once
  FetchPolicy policy;
  // Asked every 50 ms on the calling thread while objects are fetched on others: false (or an
  // exception, which is rethrown) stops every fetch. Empty: never stopped.
  std::function<bool()> keep_going;
};

// Options::cache_dir by default: $STOKER_CACHE_DIR, else $XDG_CACHE_HOME/stoker/shards, else
// ~/.cache/stoker/shards.
std::string default_cache_dir();

// An object to cache, and what its listing said it is (S3's listing gives size and ETag; a URL
// alone is stat'ed).
struct ListedObject {
  RemoteObject object;
  std::optional<ObjectInfo> info;
};

// job(k, policy) for k < n, `options.parallelism` at once, each with the options' policy and a stop
// that any job's exception and options.keep_going's false (asked every 50 ms on the calling
// thread) set. Throws the first job's error, or ErrorCode::interrupted.
void for_each_object(std::size_t n, const CacheOptions& options,
                     const std::function<void(std::size_t, const FetchPolicy&)>& job);

// What each of `objects` is: its listing's word, else stat'ed (`options.parallelism` at once).
// Throws as stat_object, naming the object.
std::vector<ObjectInfo> object_infos(const std::vector<ListedObject>& objects, const CacheOptions& options,
                                     FetchCounters& counters);

// Where the version `info` of the object at `url` lies in the cache directory `dir`, whether or not
// it is there.
std::string cached_path(const std::string& dir, const std::string& url, const ObjectInfo& info);

// A cached object this process holds: a shared flock of "NAME.lock", for as long as it lives, so
// that no other process's evict() deletes the file meanwhile. Move-only; letting go of it keeps
// the file.
class HeldObject {
 public:
  HeldObject() = default;
  HeldObject(detail::UniqueFd lock, std::string path) : lock_(std::move(lock)), path_(std::move(path)) {}
  HeldObject(HeldObject&&) noexcept = default;
  HeldObject& operator=(HeldObject&& o) noexcept {
    if (this != &o) {
      release();
      lock_ = std::move(o.lock_);
      path_ = std::move(o.path_);
    }
    return *this;
  }
  ~HeldObject() { release(); }
  const std::string& path() const noexcept { return path_; }
  explicit operator bool() const noexcept { return static_cast<bool>(lock_); }
  // The digest of its bytes its record keeps (remote/cache_record.h), nullopt where it has none.
  std::optional<std::uint64_t> digest() const;

 private:
  friend bool evict(HeldObject held);
  // Unlocked before it is closed: a process forked meanwhile shares the open file (and so the lock)
  // and would otherwise keep it after this one let go.
  void release() noexcept;
  detail::UniqueFd lock_;
  std::string path_;
};

// `object` (version `info`) in the cache at `path` (cached_path), held: found there (a cache hit)
// or fetched, after waiting for another process that fetches it. Throws as fetch_object, and
// stoker::Error (ErrorCode::interrupted) when policy.stop is set meanwhile.
HeldObject hold_object(const RemoteObject& object, const ObjectInfo& info, const std::string& path,
                       const FetchPolicy& policy, FetchCounters& counters);

// Each of `objects` (versions `infos`, at `paths`) held, as hold_object() does, `options.parallelism`
// at once, options.keep_going asked meanwhile. Throws the first error, naming its object.
std::vector<HeldObject> hold_objects(const std::vector<RemoteObject>& objects, const std::vector<ObjectInfo>& infos,
                                     const std::vector<std::string>& paths, const CacheOptions& options,
                                     FetchCounters& counters);

// The cache file `path` held, if it is there whole (its size `size`, when given) and its lock can be
// had at once; else nullopt. Never waits, never fetches.
std::optional<HeldObject> try_hold(const std::string& path, std::optional<std::uint64_t> size);

// Lets go of `held` and deletes its file, unless another process holds it too (which keeps it, and
// deletes it when its own loader evicts it). Whether the file was deleted.
bool evict(HeldObject held);

// Creates the cache directory where it is missing and checks it is writable, and that its disk has
// `needed` bytes free (0: not checked). Throws stoker::Error (io) saying what to do.
void prepare_cache_dir(const CacheOptions& options, std::uint64_t needed);
// What the disk of the cache directory `dir` has free for this process. Throws stoker::Error (io).
std::uint64_t free_bytes_of(const std::string& dir);
// Whether the cache file `path` (cached_path) is there whole.
bool is_cached(const std::string& path, std::uint64_t size);

// Every object in the cache, in order: their local paths. Each is stat'ed where its listing did not
// say what it is, found in the cache or fetched (`parallelism` at once), and verified. REQUIRES:
// they fit `limit` (a larger set is held a few objects at a time: hold_object, evict). Throws
// stoker::Error: io when the cache directory cannot hold what is missing (how much is needed and
// free) or cannot be written; the fetch's errors (stat_object, fetch_object) for an object, naming
// it.
std::vector<std::string> cache_objects(const std::vector<ListedObject>& objects, const CacheOptions& options,
                                       FetchCounters& counters);

}  // namespace stoker::remote
