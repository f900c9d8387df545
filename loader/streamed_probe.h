// The probe of a shard set whose remote shards take more than the cache holds (loader/
// shard_fetcher.h): what a probe of the whole set would say (loader/child_reads/probe.h), learned
// without holding every shard at once. It is the set's index (loader/set_index.h) where its store
// has one (each shard is then checked against its digest as it is fetched; nothing of it is kept
// in the cache, where a rewritten index would not replace it); else the cache's memo of an earlier
// loader's probe of the same objects (their URLs, sizes and ETags) with the same reader options,
// when there is one; else the set is read window by window, each window's shards held in the cache
// while a probe reads them, the windows' results joined, and the memo written for the next loader
// on the node. The last window's shards stay cached: the first epoch starts with them (or, from an
// index or a memo, with the shards another loader left in the cache).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "formats/core/reader.h"
#include "loader/child_reads/probe.h"
#include "loader/set_index.h"
#include "loader/shard_fetcher.h"

namespace stoker::detail {

// The set's index (loader/set_index.h), where its store has one: read when the cache has no memo.
struct IndexAtHand {
  // Empty, or nullopt: none. Its warnings (an index that does not describe the set) go to `warn`.
  std::function<std::optional<SetIndex>(std::vector<std::string>& warnings)> read;
  std::string name;                              // where it is
  std::function<void(const std::string&)> warn;  // told when it is not used, and why
};

// `source`: the set, its remote shards named by their cache paths (fetcher.shards()). Each window
// is read as the loader's probe reads (in a child process `in_child`, else in this one: loader/
// child_reads/probe.h). Each remote shard's identity in the result is its content's (formats::
// FileIdentity::of_content): it may be fetched again between two opens. `options` are made those of
// readers of such a set: no shard opened before it is read, no more kept open than the cache holds.
// Throws what the probe or a fetch throws.
ProbeResult probe_streamed(const std::string& source, formats::ReaderOptions& options, ShardFetcher& fetcher,
                           bool in_child, std::chrono::milliseconds timeout, const std::function<bool()>& keep_going,
                           const IndexAtHand& index = {});

}  // namespace stoker::detail
