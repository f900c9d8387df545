// LMDB plumbing shared by the reader and the writer: RAII for MDB_env and MDB_txn, error
// reporting, and the on-disk layout of docs/lmdb-layout.md.
#pragma once

#include <lmdb.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace stoker::formats {

// Layout constants (docs/lmdb-layout.md).
inline constexpr const char* kSamplesDb = "samples";  // key: 8-byte big-endian index
inline constexpr const char* kMetaDb = "stoker";      // key "schema": JSON
inline constexpr const char* kPathsDb = "paths";      // optional; key: as kSamplesDb, value: the sample's source
inline constexpr std::string_view kSchemaKey = "schema";
// Records of kMetaDb private to the writer that wrote them, not the dataset's metadata
// (Reader::metadata): h5-to-lmdb's and stoker-pack's progress, kept for a resume.
inline constexpr std::string_view kConversionProgressKey = "progress";
inline constexpr std::string_view kPackRecordKey = "pack";
inline bool is_private_meta_key(std::string_view key) noexcept {
  return key == kSchemaKey || key == kConversionProgressKey || key == kPackRecordKey;
}

inline void encode_key(std::uint64_t index, unsigned char out[8]) noexcept {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<unsigned char>(index & 0xff);
    index >>= 8;
  }
}

// Throws stoker::Error("<context>: <mdb_strerror>") when rc != MDB_SUCCESS: ErrorCode::io for an OS
// error (errno), ErrorCode::dataset for one of LMDB's (MDB_CORRUPTED, MDB_INVALID, ...).
void check_mdb(int rc, const std::string& context);

// Throws stoker::Error (ErrorCode::dataset) when a database claims more entries than its file can
// hold (every entry takes a node of at least 8 bytes on a page): a damaged or crafted count, found
// before anything is sized from it.
void check_entries_fit(MDB_txn* txn, std::uint64_t entries, const std::string& path);

class LmdbEnv {
 public:
  LmdbEnv();  // mdb_env_create
  LmdbEnv(LmdbEnv&& o) noexcept : env_(std::exchange(o.env_, nullptr)) {}
  LmdbEnv& operator=(LmdbEnv&& o) noexcept {
    if (this != &o) {
      close();
      env_ = std::exchange(o.env_, nullptr);
    }
    return *this;
  }
  LmdbEnv(const LmdbEnv&) = delete;
  LmdbEnv& operator=(const LmdbEnv&) = delete;
  ~LmdbEnv() { close(); }

  MDB_env* get() const noexcept { return env_; }
  void close() noexcept;

 private:
  MDB_env* env_ = nullptr;
};

// Aborts on destruction unless committed. Move-only.
class LmdbTxn {
 public:
  LmdbTxn() = default;
  LmdbTxn(MDB_env* env, unsigned flags, const std::string& context);
  LmdbTxn(LmdbTxn&& o) noexcept : txn_(std::exchange(o.txn_, nullptr)) {}
  LmdbTxn& operator=(LmdbTxn&& o) noexcept {
    if (this != &o) {
      abort();
      txn_ = std::exchange(o.txn_, nullptr);
    }
    return *this;
  }
  LmdbTxn(const LmdbTxn&) = delete;
  LmdbTxn& operator=(const LmdbTxn&) = delete;
  ~LmdbTxn() { abort(); }

  MDB_txn* get() const noexcept { return txn_; }
  void commit(const std::string& context);
  // mdb_txn_commit's result; the transaction is gone whatever it is.
  int try_commit() noexcept;
  void abort() noexcept;

 private:
  MDB_txn* txn_ = nullptr;
};

}  // namespace stoker::formats
