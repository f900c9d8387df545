// LmdbWriter: writes a database in stoker's LMDB layout (docs/lmdb-layout.md), as one file
// (MDB_NOSUBDIR) with no lock file. Records are appended in index order with MDB_APPEND; a
// transaction is committed every `commit_records` records or `commit_bytes` bytes, whichever comes
// first, so the dirty pages LMDB keeps on the heap stay bounded. The map grows when it fills
// (the uncommitted records are kept to replay them). Never MDB_WRITEMAP: a full disk would become
// SIGBUS. MDB_NOMETASYNC: one flush per commit instead of two; a system crash may undo the last
// commit but never breaks the database, and finish() syncs everything. Single-threaded.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "formats/core/schema_json.h"
#include "stoker/export.h"

namespace stoker::formats {

struct LmdbWriteOptions {
  std::uint64_t map_size = 0;  // initial map size; 0: estimated from the schema
  std::uint64_t commit_records = 65536;
  std::uint64_t commit_bytes = 64u << 20;
  // Called inside every commit's transaction, to store state that must commit atomically with the
  // records (the converter's resume point). Receives the meta sub-database's put function.
  std::function<void(const std::function<void(std::string_view key, std::string_view value)>&)> on_commit;
  // The number of samples is what was appended when finish() is called (a writer that skips some);
  // the schema's num_samples only sizes the first map.
  bool open_ended = false;
  // Each sample's source (the file it was made from) in the sub-database `paths`, under the
  // sample's key, committed with it (docs/lmdb-layout.md): append_sample() is given it.
  bool paths = false;
};

class STOKER_TOOLS_API LmdbWriter {
 public:
  // Opens (creating when absent) the database file `path`. Writes the schema with
  // complete = false at once, so a partial database is never taken for a complete one.
  LmdbWriter(const std::string& path, const Schema& schema, const LmdbWriteOptions& options);
  ~LmdbWriter();
  LmdbWriter(const LmdbWriter&) = delete;
  LmdbWriter& operator=(const LmdbWriter&) = delete;

  // The next index to append: 0 for a new database, the number of records for an existing one.
  std::uint64_t next_index() const;
  // Reads a value from the meta sub-database (committed state), if present.
  std::optional<std::string> meta(std::string_view key) const;

  // Appends record `next_index()`; `record` holds schema.bytes_per_sample() bytes (a schema of
  // fixed fields only).
  void append(const void* record);
  // Appends record `next_index()` in the layout of formats/lmdb/lmdb_record.h; throws for a malformed one.
  void append_record(std::span<const std::byte> record);
  // Appends sample `next_index()` given as one span per field (a fixed field's holds its
  // bytes_per_sample() bytes): encodes the record. `path`: its source, stored with options.paths.
  void append_sample(std::span<const std::span<const std::byte>> fields, std::string_view path = {});
  // Commits what is pending (also called automatically by append()).
  void commit();
  // Commits, marks the schema complete with `content_digest`, and syncs to disk.
  void finish(const std::string& content_digest);

  std::uint64_t map_size() const;

 private:
  void scan_max_bytes();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::formats
