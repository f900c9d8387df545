// Opening a dataset: which format a path holds, and the Reader for it (formats/core/reader.h).
#pragma once

#include <memory>
#include <string>

#include "formats/core/reader.h"
#include "stoker/export.h"
#include "stoker/options.h"

namespace stoker::formats {

// Decides the format of `path` from its contents: an HDF5 signature, or an LMDB meta page (a file,
// or a directory holding data.mdb). Throws stoker::Error for a missing path or neither format.
STOKER_TOOLS_API Format detect_format(const std::string& path);

// The reader of `path`: a file or LMDB database, or a shard set (formats/shard_set.h).
std::unique_ptr<Reader> open_reader(const std::string& path, const ReaderOptions& options);

}  // namespace stoker::formats
