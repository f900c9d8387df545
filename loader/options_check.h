// The checks a Loader makes of its Options before doing anything, each failure a stoker::Error
// that names the option, its value and the allowed range; and of the names of the fields it will
// deliver, once it knows them.
#pragma once

#include <functional>
#include <string>

#include "loader/remote_sources.h"
#include "remote/http_fetch.h"
#include "stoker/options.h"
#include "stoker/schema.h"

namespace stoker::detail {

void check_options(const Options& options);

// The options checked, with `source` resolved (formats/shard_set.h): a list, glob or directory of
// shards becomes the one source every process opens the same way.
// Remote names are fetched into the node's cache first (loader/remote_sources.h), counted in
// `fetches`, keep_going asked meanwhile, and held in `remote`; or, when they take more than
// Options::cache_limit, named by their paths in the cache and described in `remote.streamed`, to be
// fetched as the epochs need them.
Options checked_and_resolved(Options o, remote::FetchCounters& fetches, const std::function<bool()>& keep_going,
                             RemoteShards& remote);

// A bytes field `name` is delivered as `name` and `name.offsets` by the Python package and
// stoker::to_tensors: a field of that name beside it would replace one of them without a word.
// With OnDecodeError::skip the Python package delivers the skipped samples' positions under
// kSkippedKey: a field of that name would be replaced by them. Throws stoker::Error
// (ErrorCode::dataset) naming the fields and `source`.
void check_delivered_names(const Schema& delivered, const std::string& source, OnDecodeError on_decode_error);

}  // namespace stoker::detail
