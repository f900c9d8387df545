#include "formats/lmdb_reader.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "formats/lmdb_env.h"
#include "stoker/error.h"
#include "util/posix_error.h"

namespace stoker::formats {
namespace {

LmdbEnv open_readonly(const std::string& path, bool sequential = false) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw_errno(path);
  LmdbEnv env;
  check_mdb(mdb_env_set_maxdbs(env.get(), 4), path);
  unsigned flags = MDB_RDONLY | MDB_NOTLS | MDB_NOLOCK | (sequential ? 0u : unsigned{MDB_NORDAHEAD});
  if (!S_ISDIR(st.st_mode)) flags |= MDB_NOSUBDIR;
  int rc = mdb_env_open(env.get(), path.c_str(), flags, 0644);
  if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH) {
    throw Error(fmt::format("{}: not an LMDB database ({})", path, mdb_strerror(rc)));
  }
  if (rc == ENOENT && S_ISDIR(st.st_mode)) {
    throw Error(fmt::format("{}: directory holds no LMDB database (no data.mdb)", path));
  }
  check_mdb(rc, path + ": cannot open LMDB environment");
  return env;
}

MDB_dbi open_db(MDB_txn* txn, const char* name, const std::string& path) {
  MDB_dbi dbi;
  int rc = mdb_dbi_open(txn, name, 0, &dbi);
  if (rc == MDB_NOTFOUND) {
    throw Error(fmt::format("{}: LMDB database without a stoker schema (no '{}' sub-database); write it with "
                            "h5-to-lmdb or as docs/lmdb-layout.md describes",
                            path, name));
  }
  if (rc == MDB_INCOMPATIBLE) {
    throw Error(fmt::format("{}: LMDB database without a stoker schema ('{}' is a plain key, not a sub-database); "
                            "write it with h5-to-lmdb or as docs/lmdb-layout.md describes",
                            path, name));
  }
  check_mdb(rc, fmt::format("{}: opening sub-database '{}'", path, name));
  return dbi;
}

StoredSchema read_stored_schema(MDB_txn* txn, const std::string& path) {
  MDB_dbi meta = open_db(txn, kMetaDb, path);
  MDB_val key{kSchemaKey.size(), const_cast<char*>(kSchemaKey.data())}, val;
  int rc = mdb_get(txn, meta, &key, &val);
  if (rc == MDB_NOTFOUND) {
    throw Error(fmt::format("{}: LMDB database without a stoker schema (no key 'schema' in sub-database '{}')", path,
                            kMetaDb));
  }
  check_mdb(rc, path + ": reading the schema");
  return schema_from_json(std::string(static_cast<const char*>(val.mv_data), val.mv_size), path);
}

}  // namespace

StoredSchema lmdb_stored_schema(const std::string& path) {
  LmdbEnv env = open_readonly(path);
  LmdbTxn txn(env.get(), MDB_RDONLY, path);
  return read_stored_schema(txn.get(), path);
}

struct LmdbReader::Impl {
  std::string path;
  LmdbEnv env;
  MDB_txn* txn = nullptr;  // reset between batches
  MDB_dbi samples = 0;
  Schema full;
  Schema selected;
  std::vector<std::size_t> value_offset;  // per selected field, within a record
  std::size_t record_bytes = 0;

  ~Impl() {
    if (txn) mdb_txn_abort(txn);
  }
};

LmdbReader::LmdbReader(const std::string& path, const std::vector<std::string>& fields, bool sequential)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->env = open_readonly(path, sequential);
  check_mdb(mdb_txn_begin(impl_->env.get(), nullptr, MDB_RDONLY, &impl_->txn), path + ": begin read transaction");
  StoredSchema stored = read_stored_schema(impl_->txn, path);
  if (!stored.complete) {
    throw Error(fmt::format("{}: incomplete database (an interrupted conversion?); finish it with "
                            "h5-to-lmdb --resume",
                            path));
  }
  if (stored.schema.num_samples == 0) throw Error(fmt::format("{}: dataset is empty (0 samples)", path));
  impl_->full = stored.schema;
  impl_->samples = open_db(impl_->txn, kSamplesDb, path);
  MDB_stat st;
  check_mdb(mdb_stat(impl_->txn, impl_->samples, &st), path + ": stat of 'samples'");
  if (st.ms_entries != impl_->full.num_samples) {
    throw Error(fmt::format("{}: sub-database 'samples' holds {} records but the schema says {} samples (damaged "
                            "database?)",
                            path, st.ms_entries, impl_->full.num_samples));
  }
  impl_->record_bytes = impl_->full.bytes_per_sample();
  impl_->selected = select_fields(impl_->full, fields, path);
  for (const auto& f : impl_->selected.fields) {
    std::size_t off = 0;
    for (const auto& g : impl_->full.fields) {
      if (g.name == f.name) break;
      off += g.bytes_per_sample();
    }
    impl_->value_offset.push_back(off);
  }
  // A handle opened in a read transaction survives only that transaction's commit; then one read
  // transaction is kept, reset between batches.
  int rc = mdb_txn_commit(std::exchange(impl_->txn, nullptr));
  check_mdb(rc, path + ": opening sub-databases");
  check_mdb(mdb_txn_begin(impl_->env.get(), nullptr, MDB_RDONLY, &impl_->txn), path + ": begin read transaction");
  mdb_txn_reset(impl_->txn);
}

LmdbReader::~LmdbReader() = default;

const Schema& LmdbReader::schema() const { return impl_->selected; }

void LmdbReader::will_need(std::span<const std::uint64_t> indices) noexcept {
  Impl& m = *impl_;
  if (mdb_txn_renew(m.txn) != MDB_SUCCESS) return;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (std::uint64_t i : indices) {
    unsigned char keybuf[8];
    encode_key(i, keybuf);
    MDB_val key{8, keybuf}, val;
    if (mdb_get(m.txn, m.samples, &key, &val) != MDB_SUCCESS) continue;  // read() reports it
    const auto begin = reinterpret_cast<std::uintptr_t>(val.mv_data) & ~(page - 1);
    const auto end = reinterpret_cast<std::uintptr_t>(val.mv_data) + val.mv_size;
    (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
  }
  mdb_txn_reset(m.txn);
}

void LmdbReader::read(std::span<const std::uint64_t> indices, std::span<std::byte* const> dest) {
  Impl& m = *impl_;
  if (int rc = mdb_txn_renew(m.txn); rc != MDB_SUCCESS) check_mdb(rc, m.path + ": renew read transaction");
  struct Reset {
    MDB_txn* t;
    ~Reset() { mdb_txn_reset(t); }
  } reset{m.txn};
  const std::size_t nf = m.selected.fields.size();
  for (std::size_t k = 0; k < indices.size(); ++k) {
    unsigned char keybuf[8];
    encode_key(indices[k], keybuf);
    MDB_val key{8, keybuf}, val;
    int rc = mdb_get(m.txn, m.samples, &key, &val);
    if (rc == MDB_NOTFOUND) {
      throw Error(fmt::format("{}: sample {} (key {:016x}) is missing", m.path, indices[k], indices[k]));
    }
    if (rc != MDB_SUCCESS) check_mdb(rc, fmt::format("{}: reading sample {}", m.path, indices[k]));  // hot path: format only on failure
    if (val.mv_size != m.record_bytes) {
      throw Error(fmt::format("{}: sample {} (key {:016x}) has {} bytes, the schema says {} ({})", m.path, indices[k],
                              indices[k], val.mv_size, m.record_bytes, [&] {
                                std::string s;
                                for (const auto& f : m.full.fields) s += (s.empty() ? "" : " + ") + f.describe();
                                return s;
                              }()));
    }
    const auto* rec = static_cast<const std::byte*>(val.mv_data);
    for (std::size_t f = 0; f < nf; ++f) {
      std::size_t b = m.selected.fields[f].bytes_per_sample();
      std::memcpy(dest[f] + k * b, rec + m.value_offset[f], b);
    }
  }
}

}  // namespace stoker::formats
