// Which file a dataset is, beyond its path: device, inode, size and modification time (of an LMDB
// directory's data.mdb). Recorded when the loader opens the dataset and checked by every worker
// that opens it after, so that a dataset replaced on disk with the same schema (a new version
// copied over it, a database another process writes) is an error, never samples of two datasets
// mixed in one epoch after a respawn.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stoker::detail {

struct DatasetIdentity {
  std::uint64_t device = 0, inode = 0, size = 0, mtime_ns = 0;
  std::uint64_t version = 0;  // formats::Reader::version(): LMDB's last transaction (0: none)
  bool operator==(const DatasetIdentity&) const = default;

  std::vector<std::uint64_t> to_words() const { return {device, inode, size, mtime_ns, version}; }
  static std::optional<DatasetIdentity> from_words(const std::vector<std::uint64_t>& w);
};

// The identity of the dataset at `path` (its version 0: what a reader of it says), or nullopt when
// it cannot be stat'ed (the open that follows says why).
std::optional<DatasetIdentity> dataset_identity(const std::string& path);

// What differs between `was` and `now` ("its size (4096 -> 8192 bytes), its modification time"),
// for errors.
std::string describe_change(const DatasetIdentity& was, const DatasetIdentity& now);

}  // namespace stoker::detail
