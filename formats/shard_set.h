// Shard sets: many files read as one dataset, their samples concatenated in order.
//
// A loader resolves what its user named (a list, a glob, a directory of shards) once, in the
// process that builds it, into the sorted list of shard paths; from then on the set travels as one
// "source" string, the paths joined by newlines, so that every process (probe, fork server,
// workers) opens exactly the same shards in the same order, whatever files appear meanwhile.
// open_reader() reads such a source with a ShardedReader (formats/sharded_reader.h).
#pragma once

#include <string>
#include <vector>

#include "stoker/export.h"

namespace stoker::formats {

// Whether `source` is a shard set (more than one path).
STOKER_TOOLS_API bool is_shard_set(const std::string& source);
// Its paths, in order (one for a plain source).
STOKER_TOOLS_API std::vector<std::string> shard_paths(const std::string& source);

// The source for `named`: each entry a file or LMDB database, a glob ("train-*.h5", matches
// sorted by name) or a directory of shards (its HDF5 files and LMDB databases, sorted by name; a
// directory holding data.mdb is one LMDB database). One path stays itself; several are joined.
// Throws stoker::Error (ErrorCode::dataset) for a glob that matches nothing or a directory that
// holds no shard, naming it.
STOKER_TOOLS_API std::string resolve_source(const std::vector<std::string>& named);

// How messages name a source: the path, or "train-000.h5 and 15 more shards".
std::string source_name(const std::string& source);

}  // namespace stoker::formats
