#include "formats/lmdb/lmdb_writer.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <span>
#include <vector>

#include "base/posix_error.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_record.h"
#include "stoker/error.h"

namespace stoker::formats {

struct LmdbWriter::Impl {
  std::string path;
  Schema schema;
  LmdbWriteOptions options;
  LmdbEnv env;
  MDB_dbi samples = 0;
  MDB_dbi meta = 0;
  MDB_dbi paths = 0;  // options.paths
  std::uint64_t map_size = 0;
  std::uint64_t committed = 0;            // records durable in the database
  std::vector<std::byte> pending;         // records appended since the last commit, back to back
  std::vector<std::size_t> pending_ends;  // where each pending record ends in `pending`
  std::string pending_paths;              // options.paths: the pending records' paths, back to back
  std::vector<std::size_t> path_ends;     // where each ends in `pending_paths`
  std::size_t record_bytes = 0;           // of a record without bytes fields; the least otherwise
  std::unique_ptr<RecordLayout> layout;
  std::vector<std::uint64_t> max_bytes;  // per field: the largest bytes-field sample appended
  bool resumed = false;                  // records from an earlier run were there at open

  std::uint64_t pending_records() const { return pending_ends.size(); }
  void put_meta(MDB_txn* txn, std::string_view key, std::string_view value);
  // Writes the pending records and the schema in one transaction; false on MDB_MAP_FULL.
  bool try_commit(const StoredSchema* schema_update);
  void grow_map();
  // A record was added at the end of `pending`: ends it, and commits when a limit is reached.
  void record_appended() {
    pending_ends.push_back(pending.size());
    if (pending_records() >= options.commit_records || pending.size() >= options.commit_bytes) commit(nullptr);
  }
  void commit(const StoredSchema* schema_update);
};

void LmdbWriter::Impl::put_meta(MDB_txn* txn, std::string_view key, std::string_view value) {
  MDB_val k{key.size(), const_cast<char*>(key.data())};
  MDB_val v{value.size(), const_cast<char*>(value.data())};
  int rc = mdb_put(txn, meta, &k, &v, 0);
  if (rc == MDB_MAP_FULL) throw rc;
  check_mdb(rc, fmt::format("{}: writing '{}'", path, key));
}

bool LmdbWriter::Impl::try_commit(const StoredSchema* schema_update) {
  LmdbTxn txn(env.get(), 0, path);
  try {
    const std::uint64_t n = pending_records();
    for (std::uint64_t r = 0; r < n; ++r) {
      unsigned char keybuf[8];
      encode_key(committed + r, keybuf);
      const std::size_t begin = r ? pending_ends[r - 1] : 0;
      MDB_val key{8, keybuf}, val{pending_ends[r] - begin, pending.data() + begin};
      int rc = mdb_put(txn.get(), samples, &key, &val, MDB_APPEND);
      if (rc == MDB_MAP_FULL) return false;
      if (rc != MDB_SUCCESS) check_mdb(rc, fmt::format("{}: writing sample {}", path, committed + r));
      if (!options.paths) continue;
      const std::size_t from = r ? path_ends[r - 1] : 0;
      MDB_val source{path_ends[r] - from, pending_paths.data() + from};
      rc = mdb_put(txn.get(), paths, &key, &source, MDB_APPEND);
      if (rc == MDB_MAP_FULL) return false;
      if (rc != MDB_SUCCESS) check_mdb(rc, fmt::format("{}: writing the path of sample {}", path, committed + r));
    }
    if (schema_update) put_meta(txn.get(), kSchemaKey, schema_to_json(*schema_update));
    if (options.on_commit) {
      options.on_commit([&](std::string_view k, std::string_view v) { put_meta(txn.get(), k, v); });
    }
  } catch (int) {
    return false;  // MDB_MAP_FULL from put_meta
  }
  int rc = txn.try_commit();
  if (rc == MDB_MAP_FULL) return false;
  if (rc == ENOSPC || rc == EIO) {
    // LMDB reports a short write (a full disk) as EIO: say what the filesystem has left.
    struct statvfs vfs;
    std::string dir = std::filesystem::absolute(path).parent_path().string();
    if (::statvfs(dir.c_str(), &vfs) == 0) {
      check_mdb(rc,
                fmt::format("{}: commit ({} free in {}: is the disk full?)", path,
                            detail::format_bytes(static_cast<unsigned long long>(vfs.f_bavail) * vfs.f_frsize), dir));
    }
  }
  check_mdb(rc, path + ": commit");
  committed += pending_records();
  pending.clear();
  pending_ends.clear();
  pending_paths.clear();
  path_ends.clear();
  return true;
}

void LmdbWriter::Impl::grow_map() {
  map_size *= 2;
  check_mdb(mdb_env_set_mapsize(env.get(), map_size), fmt::format("{}: growing the map to {} bytes", path, map_size));
}

void LmdbWriter::Impl::commit(const StoredSchema* schema_update) {
  while (!try_commit(schema_update)) grow_map();
}

LmdbWriter::LmdbWriter(const std::string& path, const Schema& schema, const LmdbWriteOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.schema = schema;
  m.options = options;
  m.layout = std::make_unique<RecordLayout>(m.schema);
  m.record_bytes = m.layout->fixed_part();
  m.max_bytes.assign(schema.fields.size(), 0);
  // Records plus B-tree overhead: leaf nodes carry an 8-byte key and a node header per record,
  // and overflow pages round each large record up to whole pages.
  std::uint64_t per_record = m.record_bytes + 64;
  if (m.record_bytes > 2000) per_record = (m.record_bytes + 16 + 4095) / 4096 * 4096;
  m.map_size = options.map_size ? options.map_size : schema.num_samples * per_record + (1u << 20);
  m.map_size = (m.map_size + 4095) / 4096 * 4096;
  check_mdb(mdb_env_set_maxdbs(m.env.get(), 4), path);
  check_mdb(mdb_env_set_mapsize(m.env.get(), m.map_size), path);
  check_mdb(mdb_env_open(m.env.get(), path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK | MDB_NOMETASYNC, 0644),
            path + ": cannot create");
  MDB_envinfo info;
  check_mdb(mdb_env_info(m.env.get(), &info), path);
  if (info.me_mapsize > m.map_size) m.map_size = info.me_mapsize;  // an existing, larger database

  LmdbTxn txn(m.env.get(), 0, path);
  check_mdb(mdb_dbi_open(txn.get(), kSamplesDb, MDB_CREATE, &m.samples), path + ": creating 'samples'");
  check_mdb(mdb_dbi_open(txn.get(), kMetaDb, MDB_CREATE, &m.meta), path + ": creating 'stoker'");
  if (options.paths)
    check_mdb(mdb_dbi_open(txn.get(), kPathsDb, MDB_CREATE, &m.paths), path + ": creating '" + kPathsDb + "'");
  MDB_stat st;
  check_mdb(mdb_stat(txn.get(), m.samples, &st), path);
  m.committed = st.ms_entries;
  m.resumed = m.committed > 0;
  txn.commit(path);
  if (m.committed == 0) {
    StoredSchema s{schema, false, std::nullopt, {}};
    m.commit(&s);
  }
}

LmdbWriter::~LmdbWriter() = default;

std::uint64_t LmdbWriter::next_index() const { return impl_->committed + impl_->pending_records(); }

void LmdbWriter::scan_max_bytes() {
  Impl& m = *impl_;
  LmdbTxn txn(m.env.get(), MDB_RDONLY, m.path);
  MDB_cursor* cursor = nullptr;
  check_mdb(mdb_cursor_open(txn.get(), m.samples, &cursor), m.path + ": cursor");
  std::fill(m.max_bytes.begin(), m.max_bytes.end(), 0);
  MDB_val key, val;
  int rc;
  for (rc = mdb_cursor_get(cursor, &key, &val, MDB_FIRST); rc == MDB_SUCCESS;
       rc = mdb_cursor_get(cursor, &key, &val, MDB_NEXT)) {
    const std::span<const std::byte> record(static_cast<const std::byte*>(val.mv_data), val.mv_size);
    if (!m.layout->check(record).empty()) continue;  // the reader names it
    for (std::size_t f = 0; f < m.schema.fields.size(); ++f) {
      if (m.schema.fields[f].is_bytes()) {
        m.max_bytes[f] = std::max<std::uint64_t>(m.max_bytes[f], m.layout->field(record, f).size());
      }
    }
  }
  mdb_cursor_close(cursor);
  if (rc != MDB_NOTFOUND) check_mdb(rc, m.path + ": scanning the records");
}

std::uint64_t LmdbWriter::map_size() const { return impl_->map_size; }

std::optional<std::string> LmdbWriter::meta(std::string_view key) const {
  LmdbTxn txn(impl_->env.get(), MDB_RDONLY, impl_->path);
  MDB_val k{key.size(), const_cast<char*>(key.data())}, v;
  int rc = mdb_get(txn.get(), impl_->meta, &k, &v);
  if (rc == MDB_NOTFOUND) return std::nullopt;
  check_mdb(rc, impl_->path);
  return std::string(static_cast<const char*>(v.mv_data), v.mv_size);
}

void LmdbWriter::append(const void* record) {
  if (impl_->layout->variable())
    throw Error(ErrorCode::dataset, impl_->path + ": a schema with bytes fields needs append_record()");
  append_record({static_cast<const std::byte*>(record), impl_->record_bytes});
}

void LmdbWriter::append_sample(std::span<const std::span<const std::byte>> fields, std::string_view path) {
  Impl& m = *impl_;
  if (fields.size() != m.schema.fields.size()) {
    throw Error(ErrorCode::dataset, fmt::format("{}: sample {} has {} fields, the schema {}", m.path, next_index(),
                                                fields.size(), m.schema.fields.size()));
  }
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (!m.schema.fields[f].is_bytes() && fields[f].size() != m.schema.fields[f].bytes_per_sample()) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: sample {} field '{}' has {} bytes, the schema says {}", m.path, next_index(),
                              m.schema.fields[f].name, fields[f].size(), m.schema.fields[f].bytes_per_sample()));
    }
  }
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (m.schema.fields[f].is_bytes()) m.max_bytes[f] = std::max<std::uint64_t>(m.max_bytes[f], fields[f].size());
  }
  m.layout->encode(fields, m.pending);  // straight into the pending records: well formed by construction
  if (m.options.paths) {
    m.pending_paths += path;
    m.path_ends.push_back(m.pending_paths.size());
  }
  m.record_appended();
}

void LmdbWriter::append_record(std::span<const std::byte> record) {
  Impl& m = *impl_;
  if (std::string why = m.layout->check(record); !why.empty()) {
    throw Error(ErrorCode::dataset, fmt::format("{}: record {} {}", m.path, next_index(), why));
  }
  for (std::size_t f = 0; f < m.schema.fields.size(); ++f) {
    if (m.schema.fields[f].is_bytes()) {
      m.max_bytes[f] = std::max<std::uint64_t>(m.max_bytes[f], m.layout->field(record, f).size());
    }
  }
  m.pending.insert(m.pending.end(), record.begin(), record.end());
  m.record_appended();
}

void LmdbWriter::commit() { impl_->commit(nullptr); }

void LmdbWriter::finish(const std::string& content_digest) {
  Impl& m = *impl_;
  m.commit(nullptr);
  if (m.options.open_ended) m.schema.num_samples = m.committed;
  if (m.committed != m.schema.num_samples) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: finishing with {} of {} samples written", m.path, m.committed, m.schema.num_samples));
  }
  // The largest samples of a resumed conversion's earlier runs are not known here: scan them.
  if (m.layout->variable() && m.resumed) scan_max_bytes();
  StoredSchema s{m.schema, true, content_digest, m.max_bytes};
  m.commit(&s);
  check_mdb(mdb_env_sync(m.env.get(), 1), m.path + ": sync");
}

}  // namespace stoker::formats
