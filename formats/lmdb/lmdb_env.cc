#include "formats/lmdb/lmdb_env.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include "stoker/error.h"

namespace stoker::formats {

void check_mdb(int rc, const std::string& context) {
  if (rc == MDB_SUCCESS) return;
  // LMDB's own codes (negative) are about the database; positive ones are errno values of OS calls.
  throw Error(rc > 0 ? ErrorCode::io : ErrorCode::dataset, fmt::format("{}: {}", context, mdb_strerror(rc)));
}

void check_entries_fit(MDB_txn* txn, std::uint64_t entries, const std::string& path) {
  mdb_filehandle_t fd;
  struct stat st;
  if (mdb_env_get_fd(mdb_txn_env(txn), &fd) != MDB_SUCCESS || ::fstat(fd, &st) != 0) return;  // no bound known
  const auto bytes = static_cast<std::uint64_t>(st.st_size);
  if (entries > bytes / 8) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: claims {} entries, more than a database of {} bytes can hold: the file is damaged",
                            path, entries, bytes));
  }
}

LmdbEnv::LmdbEnv() { check_mdb(mdb_env_create(&env_), "mdb_env_create"); }

void LmdbEnv::close() noexcept {
  if (env_) mdb_env_close(env_);
  env_ = nullptr;
}

LmdbTxn::LmdbTxn(MDB_env* env, unsigned flags, const std::string& context) {
  check_mdb(mdb_txn_begin(env, nullptr, flags, &txn_), context + ": begin transaction");
}

void LmdbTxn::commit(const std::string& context) {
  MDB_txn* t = std::exchange(txn_, nullptr);
  check_mdb(mdb_txn_commit(t), context + ": commit");
}

int LmdbTxn::try_commit() noexcept { return mdb_txn_commit(std::exchange(txn_, nullptr)); }

void LmdbTxn::abort() noexcept {
  if (txn_) mdb_txn_abort(txn_);
  txn_ = nullptr;
}

}  // namespace stoker::formats
