// What a tool finds where it is to write, and what it may replace there. A tool replaces (with
// --force) or discards (an interrupted run's OUTPUT.partial) only what it writes itself: a dataset
// of its formats (an LMDB file or environment directory, an HDF5 file, by their contents, not their
// names) or a directory of such shards with the tool's journal. Anything else, a directory of
// someone's files, a shard set with a file of someone else's in it, a file that merely has the
// name, a symbolic link, is refused with or without --force, by a message that says what is there
// and never suggests --force.
#pragma once

#include <string>

namespace stoker::tools {

// What a tool writes.
struct OutputKind {
  std::string tool;     // its name, for messages
  bool lmdb = false;    // LMDB databases
  bool hdf5 = false;    // HDF5 files
  std::string journal;  // the file a shard set's directory may hold beside its shards ("" none)
};

// What is at a path, as a tool that writes `kind` sees it.
struct Found {
  enum class Is { nothing, ours, foreign } is = Is::nothing;
  // Ours: "an LMDB database", "a shard set of 3 datasets"; foreign: "a directory holding 1234
  // files (cat001.jpg is a file of 2.1 KiB, not an LMDB database)" (its first entry, by name, that
  // is not the tool's), "a symbolic link to /data/train".
  std::string what;
};

// What is at `path` (never followed, if a link). With `interrupted`, what an interrupted run leaves
// counts as ours too: an empty file (created, not yet written), and in a directory the unfinished
// shards (NAME.partial) and the journal's NAME.tmp.
Found inspect_output(const std::string& path, const OutputKind& kind, bool interrupted = false);

// Before a tool writes `path`: returns when nothing is there, or when `force` and what is there is
// `kind`'s; throws stoker::Error (ErrorCode::invalid_option) naming what is there otherwise:
// "out.lmdb: already exists (an LMDB database); use --force to replace it", or "photos: is a
// directory holding 1234 files (cat001.jpg is a file of 2.1 KiB, not an LMDB database): not
// replaced; name a new path".
void check_output(const std::string& path, const OutputKind& kind, bool force);

// Before a tool continues or discards `partial` (OUTPUT.partial): whether it is there; throws
// stoker::Error (ErrorCode::invalid_option) when what is there is not an interrupted run of `kind`.
bool check_partial(const std::string& partial, const OutputKind& kind);

}  // namespace stoker::tools
