// A loader's remote names (Options::source, sources or a mix's paths that are http(s) URLs or s3://
// names) made local: their brace ranges expanded, an S3 prefix listed (remote/s3_store.h), their
// objects cached on this node (remote/shard_cache.h), and each name replaced by its objects'
// cached files, in order, before the shard set is resolved.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loader/set_index.h"
#include "loader/shard_fetcher.h"
#include "remote/http_fetch.h"
#include "stoker/options.h"

namespace stoker::detail {

// A loader's remote objects when together they take more than Options::cache_limit: not fetched
// before the first batch, but as the epochs need them (loader/shard_fetcher.h).
// So are those of a set with an index (loader/set_index.h) on a node that has not cached it
// whole: its first epoch reads them as they arrive.
struct StreamedObjects {
  remote::CacheOptions cache;
  std::map<std::string, ShardFetcher::RemoteShard> by_path;  // by its path in the cache
  std::size_t capacity = 0;                                  // shards the cache holds at once
  std::uint64_t bytes = 0;                                   // all of them
  // The set's index (loader/set_index.h), read from the store when first called, where it has one
  // that describes the set (else nullopt, with a warning where it has one that does not); empty
  // for a loader of several sources.
  std::function<std::optional<SetIndex>(std::vector<std::string>& warnings)> find_index;
  std::string index_name;  // where it is looked for, once it has been
};

// What resolving a loader's remote names leaves it: holds on the shards of a set cached whole
// (remote::HeldObject: a loader with a smaller cache on the node never deletes them), at most
// kMaxHeldWhole of them; or the objects of a set streamed.
struct RemoteShards {
  std::vector<remote::HeldObject> held;
  std::optional<StreamedObjects> streamed;
  std::vector<std::string> warnings;  // for the loader to give (an index that is not used, and why)
  bool any = false;                   // some of the names were remote
};
// More shards than this (a descriptor each) are cached whole without holds: docs/remote.md.
inline constexpr std::size_t kMaxHeldWhole = 256;

// For each of `named`, what it names locally: itself, or the cached files of the remote objects it
// stands for (one name may stand for many), in order. The objects of all of `named` are fetched
// together (Options::fetch_parallelism at once; Options::cache_limit bounds them all), keep_going
// asked meanwhile (remote/shard_cache.h), and held in `remote.held`; or, when they take more than
// Options::cache_limit, or when `named` is one remote set, not all cached, whose store has an index
// beside its first shard (loader/set_index.h), not fetched but described in `remote.streamed`
// (their names are then their paths in the cache, which may not be there yet). Throws
// stoker::Error (invalid_option) when the cache cannot hold even the largest object, and the
// errors of listing, stat'ing and fetching them.
std::vector<std::vector<std::string>> cached_names(const std::vector<std::string>& named, const Options& options,
                                                   remote::FetchCounters& counters,
                                                   const std::function<bool()>& keep_going, RemoteShards& remote);

// The fetcher of `streamed`'s shards for `source`, the set they were resolved into.
std::unique_ptr<ShardFetcher> streamed_fetcher(const StreamedObjects& streamed, const std::string& source,
                                               remote::FetchCounters& counters);

}  // namespace stoker::detail
