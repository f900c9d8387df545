// A loader's remote names (Options::source, sources or a mix's paths that are http(s) URLs or s3://
// names) made local: their brace ranges expanded, an S3 prefix listed (remote/s3_store.h), their
// objects cached on this node (remote/shard_cache.h), and each name replaced by its objects'
// cached files, in order, before the shard set is resolved.
#pragma once

#include <string>
#include <vector>

#include "remote/http_fetch.h"
#include "stoker/options.h"

namespace stoker::detail {

// `named` with each remote name (one may stand for many objects) replaced by the path
// of its object in the cache, fetched where missing; other names as they are. The objects of all
// of `named` are fetched together, Options::fetch_parallelism at once.
std::vector<std::string> cached_names(const std::vector<std::string>& named, const Options& options,
                                      remote::FetchCounters& counters);

}  // namespace stoker::detail
