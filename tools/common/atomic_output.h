// How the tools write their output: into OUTPUT.partial, a file or directory they create
// themselves (never through a link planted there), synced, then moved over OUTPUT in one step, so
// that a reader sees the old dataset or the new one, never half of one, and a crash leaves only
// the .partial for --resume.
#pragma once

#include <string>

namespace stoker::tools {

// fsync of a file or directory (its entries): throws stoker::Error naming `path`.
void fsync_path(const std::string& path, int open_flags);
void fsync_dir(const std::string& dir);

// Creates the empty file `path`, exclusively and never through a symbolic link (O_EXCL |
// O_NOFOLLOW): a leftover or a link is an error, never a file written through.
void create_exclusive(const std::string& path);

// Throws when `path` is a symbolic link (dangling or not): `tool` writes only what it created.
void refuse_symlink(const std::string& path, const std::string& tool);

// Writes `text` into `path` whole or not at all: into PATH.tmp, synced, renamed over `path`, the
// directory synced (a job killed while writing leaves the old file, or none). Throws stoker::Error
// naming the file.
void write_file_atomically(const std::string& path, const std::string& text);

// Moves `from` over `to` atomically: a rename, or, when one of them is a directory (of shards, an
// LMDB directory), which rename(2) cannot put in the place of the other, an exchange of the two
// (renameat2 RENAME_EXCHANGE) and then the removal of the old one. Where the file system cannot
// exchange, the old `to` is removed first (a crash then leaves the new one in `from`). The parent
// directory is synced.
void move_into_place(const std::string& from, const std::string& to);

}  // namespace stoker::tools
