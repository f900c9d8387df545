// Which file a dataset (or one shard of a set) is, beyond its path: device, inode, size and
// modification time (of an LMDB directory's data.mdb), and what its reader says changes with every
// write (Reader::version(): LMDB's last transaction). Recorded when a dataset is first read and
// compared whenever it is opened again, so that a file replaced on disk or written in place
// meanwhile is an error naming it, never samples of two versions mixed in one epoch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace stoker::formats {

struct FileIdentity {
  std::uint64_t device = 0, inode = 0, size = 0, mtime_ns = 0;
  std::uint64_t version = 0;  // Reader::version() (0: none)
  bool operator==(const FileIdentity&) const = default;

  // A cached remote shard's (docs/remote.md): its path names its content, and it may be fetched
  // again, a new inode at a new time, after it was evicted; its size and version say which it is.
  static FileIdentity of_content(std::uint64_t size, std::uint64_t version) noexcept {
    return FileIdentity{0, 0, size, 0, version};
  }
  bool by_content() const noexcept { return device == 0 && inode == 0; }
  // Whether the file found `now` is this one.
  bool matches(const FileIdentity& now) const noexcept {
    return by_content() ? size == now.size && version == now.version : *this == now;
  }

  // Five words, for the JSON that carries it to other processes; from_words gives nullopt for
  // anything else (an empty list: not recorded).
  std::vector<std::uint64_t> to_words() const { return {device, inode, size, mtime_ns, version}; }
  static std::optional<FileIdentity> from_words(const std::vector<std::uint64_t>& w);
};

// The identity of the file or LMDB database at `path` (version 0: what a reader of it says), or
// nullopt when it cannot be stat'ed (the open that follows says why). One stat: cheap enough for
// every open of a shard.
std::optional<FileIdentity> file_identity(const std::string& path);

// What differs between `was` and `now` ("its size (4096 -> 8192 bytes), its modification time"),
// for errors.
std::string describe_change(const FileIdentity& was, const FileIdentity& now);

}  // namespace stoker::formats
