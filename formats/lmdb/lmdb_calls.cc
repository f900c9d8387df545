#include "formats/lmdb/lmdb_calls.h"

namespace stoker::formats {
namespace {

LmdbCalls g_default;
LmdbCalls* g_calls = &g_default;

}  // namespace

int LmdbCalls::mdb_get(MDB_txn* txn, MDB_dbi dbi, MDB_val* key, MDB_val* value) {
  return ::mdb_get(txn, dbi, key, value);
}

int LmdbCalls::mdb_cursor_get(MDB_cursor* cursor, MDB_val* key, MDB_val* value, MDB_cursor_op op) {
  return ::mdb_cursor_get(cursor, key, value, op);
}

LmdbCalls& LmdbCalls::get() noexcept { return *g_calls; }

LmdbCalls* LmdbCalls::install(LmdbCalls* calls) noexcept {
  LmdbCalls* previous = g_calls == &g_default ? nullptr : g_calls;
  g_calls = calls ? calls : &g_default;
  return previous;
}

}  // namespace stoker::formats
