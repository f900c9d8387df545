// What "NAME.lock" of a cached object says of NAME: the boot of the kernel that wrote it, and the
// digest of its bytes (remote/content_digest.h). Files are written without fsync, so that a cold
// epoch runs at the network's speed and not at the disk's: in the boot that wrote a file, each of
// its bytes is in the page cache or on disk, whatever becomes of the process that wrote it (a kill,
// an OOM). A power loss or a kernel crash may lose bytes never written back (XFS leaves zeros
// under the right size), so in a later boot a file is read once and checked against its digest
// before it is used (its record then names this boot); one whose digest differs, or that has no
// record, is fetched again. A partial file is resumed only in the boot that wrote it. Where the
// kernel names no boot, files are synced before they are named, and their record says so.
//
// Records are written only under the object's flock: exclusive while it is fetched, shared when a
// check rewrites the boot (each such write the same bytes, so readers never see two versions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace stoker::remote {

struct CacheRecord {
  std::string boot;                     // the boot that wrote it (this_boot()); "synced" where none
  std::optional<std::uint64_t> digest;  // of the whole file; none while it is written as a partial
  bool operator==(const CacheRecord&) const = default;
};

// This kernel's boot (/proc/sys/kernel/random/boot_id): "" where it cannot be read (then files are
// synced, and their record's boot is "synced").
const std::string& this_boot();

// The record in `lock_fd`; nullopt where there is none (or not one this version wrote).
std::optional<CacheRecord> read_record(int lock_fd);
// Replaces the record in `lock_fd` (named `lock_path` in errors). Throws stoker::Error (io).
void write_record(int lock_fd, const CacheRecord& record, const std::string& lock_path);

// Whether the cache file `path` is its object whole: `size` bytes, and its record names this boot
// or a sync, or its bytes match the record's digest (read now, once: the record then names this
// boot). `lock_fd`, open on "NAME.lock": the caller holds its flock; -1: it is opened here and, for
// a check that reads the file, locked shared without waiting (false when another process holds it
// exclusively: it is fetching or deleting the file). Throws stoker::Error (io) for a read that fails.
bool complete(const std::string& path, std::uint64_t size, int lock_fd = -1);

// Makes the download `partial`, whose bytes have the digest `digest`, the cache file `path`: synced
// first where the kernel names no boot, renamed, then its record written (`lock_fd`, held
// exclusively). Throws stoker::Error (io).
void name_complete(const std::string& partial, const std::string& path, std::uint64_t digest, int lock_fd);

// Before a fetch (`lock_fd` held exclusively): deletes the file at `path` that is not complete() (a
// copy that failed its check, which the record must never vouch for), and a partial that another
// boot (or a run that synced) left, whose bytes may not be those it wrote; and records the partial
// this boot writes.
void start_partial(const std::string& path, const std::string& partial, int lock_fd);

}  // namespace stoker::remote
