// LmdbCalls: the LMDB calls that fail in production (reading records: mdb_get, mdb_cursor_get),
// behind a seam as the OS calls are (base/env.h), so that tests can make them fail on demand: an
// error code, or a value of a size the file claims. The default passes each call through.
//
// Not synchronised: install before any Loader exists and keep it until the last one is gone.
// Worker processes forked from the process that installed it inherit it.
#pragma once

#include <lmdb.h>

namespace stoker::formats {

class LmdbCalls {
 public:
  virtual ~LmdbCalls() = default;
  virtual int mdb_get(MDB_txn* txn, MDB_dbi dbi, MDB_val* key, MDB_val* value);
  virtual int mdb_cursor_get(MDB_cursor* cursor, MDB_val* key, MDB_val* value, MDB_cursor_op op);

  // The installed one, or the default.
  static LmdbCalls& get() noexcept;
  // Installs `calls` (nullptr: the default again) and returns the one it replaces.
  static LmdbCalls* install(LmdbCalls* calls) noexcept;
};

}  // namespace stoker::formats
