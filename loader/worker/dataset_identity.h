// Which file a dataset is, beyond its path (formats/core/file_identity.h): recorded when the
// loader opens a single file or LMDB database and checked by every worker that opens it after, so
// that a dataset replaced on disk with the same schema (a new version copied over it, a database
// another process writes) is an error, never samples of two datasets mixed in one epoch after a
// respawn. A shard set has none of its own: each shard's identity, as the probe recorded it, is
// checked whenever a reader opens that shard (formats/sharded_reader.h), so the error names it.
#pragma once

#include <optional>
#include <string>

#include "formats/core/file_identity.h"

namespace stoker::detail {

using DatasetIdentity = formats::FileIdentity;
using formats::describe_change;

// The identity of the dataset at `path` (its version 0: what a reader of it says), or nullopt when
// it cannot be stat'ed (the open that follows says why) or is a shard set.
std::optional<DatasetIdentity> dataset_identity(const std::string& path);

}  // namespace stoker::detail
