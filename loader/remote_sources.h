// A loader's remote names (Options::source, sources or a mix's paths that are http(s) URLs or s3://
// names) made local: their brace ranges expanded, an S3 prefix listed (remote/s3_store.h), their
// objects cached on this node (remote/shard_cache.h), and each name replaced by its objects'
// cached files, in order, before the shard set is resolved.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "remote/http_fetch.h"
#include "stoker/options.h"

namespace stoker::detail {

// For each of `named`, what it names locally: itself, or the cached files of the remote objects it
// stands for (one name may stand for many), in order. The objects of all of `named` are fetched
// together (Options::fetch_parallelism at once; Options::cache_limit bounds them all), keep_going
// asked meanwhile (remote/shard_cache.h).
std::vector<std::vector<std::string>> cached_names(const std::vector<std::string>& named, const Options& options,
                                                   remote::FetchCounters& counters,
                                                   const std::function<bool()>& keep_going);

}  // namespace stoker::detail
