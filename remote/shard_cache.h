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

// Every object in the cache, in order: their local paths. Each is stat'ed where its listing did not
// say what it is, found in the cache or fetched (`parallelism` at once), and verified. Throws
// stoker::Error: invalid_option when the set is larger than `limit`; io when the cache directory
// cannot hold what is missing (how much is needed and free) or cannot be written; the fetch's
// errors (stat_object, fetch_object) for an object, naming it.
std::vector<std::string> cache_objects(const std::vector<ListedObject>& objects, const CacheOptions& options,
                                       FetchCounters& counters);

}  // namespace stoker::remote
