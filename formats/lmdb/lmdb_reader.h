// LmdbReader: one mdb_get per sample from the "samples" sub-database (docs/lmdb-layout.md), or,
// for a database without a stoker schema (written with py-lmdb, say), from the main database whose
// keys are the sample indices as decimal, zero-padded decimal or 8-byte big-endian text: one bytes
// field "data", or a fixed field "data" when the values are .npy arrays of one header.
//
// Opens with MDB_RDONLY | MDB_NOTLS | MDB_NORDAHEAD | MDB_NOLOCK: datasets are immutable while
// read, so no lock file (read-only and network directories work) and no reader-slot limit however
// many ranks and workers read one database. One read transaction, reset between batches. A
// database written meanwhile by a program on this machine (its last committed transaction, in its
// meta pages, no longer the one it had when it was opened, asked before and after each batch) is
// an error, never a batch of samples of two versions or of pages a writer reused. (LMDB's lock
// file would make a writer keep the pages of open reads, but it is found by the path: a database
// replaced by a rename, as stoker's tools write them, or written by a program without the lock,
// leaves a lock file whose recorded transaction a reader would trust. On a network file system
// neither the lock file nor this check sees another host's writes as they happen: a client may
// serve pages it cached; the identity check at each worker's open still sees a changed file.)
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "formats/core/reader.h"
#include "formats/core/schema_json.h"
#include "stoker/export.h"

namespace stoker::formats {

// The stored schema of the database at `path`. Throws stoker::Error for a missing path, a file that
// is not LMDB, or an LMDB database without a stoker schema; an incomplete database is returned as
// such (complete == false).
STOKER_TOOLS_API StoredSchema lmdb_stored_schema(const std::string& path);

class STOKER_TOOLS_API LmdbReader final : public Reader {
 public:
  // Throws for an incomplete database (an interrupted conversion) or an unknown field; for a
  // database without a schema, for keys that are not 0 .. N-1 (naming a missing one).
  // `sequential`: samples are read in key order (the kernel's read-ahead helps). `known`: the
  // schema found by an earlier open of the same database (its keys are not scanned again).
  // `key_templates` (Options::lmdb_keys): a database without a schema whose sample is one key per
  // field (formats/lmdb/lmdb_key_templates.h), `count_key` the key holding their count (or empty).
  LmdbReader(const std::string& path, const std::vector<std::string>& fields, bool sequential = false,
             const Schema* known = nullptr, std::string_view key_templates = {}, std::string_view count_key = {});
  ~LmdbReader() override;

  const Schema& schema() const override;
  using Reader::read;
  void read(std::span<const std::uint64_t> indices, std::span<const FieldOut> out) override;
  // Exact: from the schema record (stoker's layout) or the scan of the keys (a database without one).
  SampleBound sample_bound(std::size_t f) const override;
  // How a database without a stoker schema was understood ("LMDB without a stoker schema: keys
  // decimal, ...; values bytes"); empty for stoker's layout.
  std::string describe_layout() const override;
  // madvise(WILLNEED) on the records' pages in the map.
  void will_need(std::span<const std::uint64_t> indices) noexcept override;
  // The database's last committed transaction when it was opened.
  std::uint64_t version() const noexcept override;
  // The records of the `stoker` sub-database but the schema and the writers' private ones.
  std::map<std::string, std::string> metadata() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::formats
