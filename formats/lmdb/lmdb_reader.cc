#include "formats/lmdb/lmdb_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <utility>

#include "base/env.h"
#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "base/progress_note.h"
#include "formats/core/npy.h"
#include "formats/lmdb/lmdb_calls.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_keys.h"
#include "formats/lmdb/lmdb_record.h"
#include "formats/lmdb/lmdb_templated.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

LmdbEnv open_readonly(const std::string& path, bool sequential = false) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) detail::throw_open_errno(path);
  LmdbEnv env;
  check_mdb(mdb_env_set_maxdbs(env.get(), 4), path);
  unsigned flags = MDB_RDONLY | MDB_NOTLS | MDB_NOLOCK | (sequential ? 0u : unsigned{MDB_NORDAHEAD});
  if (!S_ISDIR(st.st_mode)) flags |= MDB_NOSUBDIR;
  int rc = mdb_env_open(env.get(), path.c_str(), flags, 0644);
  if (rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH) {
    throw Error(ErrorCode::dataset, fmt::format("{}: not an LMDB database ({})", path, mdb_strerror(rc)));
  }
  if (rc == ENOENT && S_ISDIR(st.st_mode)) {
    throw Error(ErrorCode::dataset, fmt::format("{}: directory holds no LMDB database (no data.mdb)", path));
  }
  check_mdb(rc, path + ": cannot open LMDB environment");
  return env;
}

// Sub-database `name`, or nullopt when the database has none (a database without a stoker schema).
std::optional<MDB_dbi> find_db(MDB_txn* txn, const char* name, const std::string& path) {
  MDB_dbi dbi;
  int rc = mdb_dbi_open(txn, name, 0, &dbi);
  if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) return std::nullopt;
  check_mdb(rc, fmt::format("{}: opening sub-database '{}'", path, name));
  return dbi;
}

MDB_dbi open_db(MDB_txn* txn, const char* name, const std::string& path) {
  MDB_dbi dbi;
  int rc = mdb_dbi_open(txn, name, 0, &dbi);
  if (rc == MDB_NOTFOUND) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: LMDB database without a stoker schema (no '{}' sub-database); write it with "
                            "h5-to-lmdb or as docs/lmdb-layout.md describes",
                            path, name));
  }
  if (rc == MDB_INCOMPATIBLE) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: LMDB database without a stoker schema ('{}' is a plain key, not a sub-database); "
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
    throw Error(
        ErrorCode::dataset,
        fmt::format("{}: LMDB database without a stoker schema (no key 'schema' in sub-database '{}')", path, kMetaDb));
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

namespace {}  // namespace

struct LmdbReader::Impl {
  std::string path;
  LmdbEnv env;
  MDB_txn* txn = nullptr;    // reset between batches
  std::uint64_t txn_id = 0;  // the last committed transaction when the database was opened
  MDB_dbi samples = 0;
  Schema full;
  Schema selected;
  std::vector<std::size_t> full_index;   // per selected field: its index in `full`
  std::vector<std::uint64_t> max_bytes;  // per selected field: exact bound of a bytes field, 0 unknown
  std::unique_ptr<RecordLayout> layout;  // stoker's layout
  // A database without a stoker schema: its keys, and the .npy header every value carries (fixed "data").
  std::optional<PlainKeys> plain;
  std::optional<NpyHeader> npy;
  std::vector<std::byte> npy_prefix;  // the first value's header bytes, which every value must repeat
  // A database whose sample is one key per field (Options::lmdb_keys).
  std::optional<TemplatedLayout> templated;
  std::string plain_layout;

  ~Impl() {
    if (txn) mdb_txn_abort(txn);
  }
  MDB_val key_of(std::uint64_t i, char* buf) const {
    if (plain) return plain->key(i, buf);
    encode_key(i, reinterpret_cast<unsigned char*>(buf));
    return {8, buf};
  }
  std::string key_text(std::uint64_t i) const {
    char buf[24];
    const MDB_val k = key_of(i, buf);
    return plain ? show_key(k.mv_data, k.mv_size) : fmt::format("{:016x}", i);
  }
  std::string too_large(std::uint64_t i, std::size_t bytes) const {
    return fmt::format("{}: sample {} (key {}) holds {} bytes, more than a sample may ({} bytes, kMaxSampleBytes)",
                       path, i, key_text(i), bytes, kMaxSampleBytes);
  }
  void open_plain(MDB_txn* txn, const Schema* known);
  // Every key from the cursor's current one (sample 0's) on: each must be a sample index of `keys`'
  // form, every index below `n` once. Returns the largest value's size.
  std::uint64_t scan_plain_keys(MDB_cursor* cursor, MDB_val k, MDB_val v, const PlainKeys& keys, std::uint64_t n,
                                const std::string& expect) const;
  // Throws unless the database's last committed transaction, as its meta pages say now, is the one
  // it had when it was opened. Without a lock file, a read transaction sees the newest meta page
  // at each renew, and a writer may reuse the pages of an older one: so this is asked before a
  // batch is read and again after, and a batch read while the database was written is never
  // delivered.
  void check_unchanged() const;
  // The same for the transaction `now` a read sees.
  void check_unchanged(std::uint64_t now) const;
  // The records of `indices` into `out`, in the read transaction (renewed).
  void read_records(std::span<const std::uint64_t> indices, std::span<const FieldOut> out);
};

void LmdbReader::Impl::check_unchanged() const {
  MDB_envinfo info;
  check_mdb(mdb_env_info(env.get(), &info), path + ": mdb_env_info");
  check_unchanged(info.me_last_txnid);
}

void LmdbReader::Impl::check_unchanged(std::uint64_t now) const {
  if (now != txn_id) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: the database was written while it was read (its last transaction was {} when it "
                            "was opened, {} now): its samples are not mixed into this loader's epochs; stop the "
                            "writer, or read a copy, and build a new Loader",
                            path, txn_id, now));
  }
}

std::uint64_t LmdbReader::Impl::scan_plain_keys(MDB_cursor* cursor, MDB_val k, MDB_val v, const PlainKeys& keys,
                                                std::uint64_t n, const std::string& expect) const {
  std::uint64_t largest = 0;
  std::vector<bool> seen(n, false);
  std::uint64_t count = 0;
  int rc = MDB_SUCCESS;
  for (; rc == MDB_SUCCESS; rc = LmdbCalls::get().mdb_cursor_get(cursor, &k, &v, MDB_NEXT), ++count) {
    // Progress, for the probe's watch (base/progress_note.h); bounded, as such loops must be:
    // pages that lead back to themselves would otherwise be a scan that never ends.
    detail::note_progress();
    if (count >= n) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: its pages hold more keys than the {} it counts: the database is damaged", path, n));
    }
    const auto i = keys.parse(k);
    if (!i) {
      throw Error(ErrorCode::dataset, fmt::format("{}: key {} is not a sample index like the first key ({}); {}", path,
                                                  show_key(k.mv_data, k.mv_size), keys.describe(), expect));
    }
    if (*i < n) seen[*i] = true;
    // Refused here, not at the read: its size would otherwise size the slots.
    if (v.mv_size > kMaxSampleBytes) throw Error(ErrorCode::dataset, too_large(*i, v.mv_size));
    largest = std::max<std::uint64_t>(largest, v.mv_size);
  }
  if (rc != MDB_NOTFOUND) check_mdb(rc, path + ": scanning the keys");
  const auto missing = std::find(seen.begin(), seen.end(), false);
  if (missing != seen.end()) {
    const auto i = static_cast<std::uint64_t>(missing - seen.begin());
    throw Error(ErrorCode::dataset,
                fmt::format("{}: sample {} (key {}) is missing: the database holds {} keys, so they must be 0 .. {} "
                            "({})",
                            path, i, key_text(i), n, n - 1, keys.describe()));
  }
  return largest;
}

void LmdbReader::Impl::open_plain(MDB_txn* t, const Schema* known) {
  check_mdb(mdb_dbi_open(t, nullptr, 0, &samples), path + ": opening the main database");
  MDB_stat st;
  check_mdb(mdb_stat(t, samples, &st), path + ": stat");
  if (st.ms_entries == 0)
    throw Error(ErrorCode::dataset, fmt::format("{}: database is empty (no stoker schema and no keys)", path));
  const std::uint64_t n = st.ms_entries;
  check_entries_fit(t, n, path);  // before a bit per key is allocated
  MDB_cursor* raw = nullptr;
  check_mdb(mdb_cursor_open(t, samples, &raw), path + ": cursor");
  std::unique_ptr<MDB_cursor, void (*)(MDB_cursor*)> cursor(raw, mdb_cursor_close);
  MDB_val k, v;
  check_mdb(LmdbCalls::get().mdb_cursor_get(raw, &k, &v, MDB_FIRST), path + ": first key");
  const std::string expect =
      "a database without a stoker schema is read when its keys are the sample indices 0 .. N-1 written as decimal "
      "(b'17'), zero-padded decimal (b'00000017') or 8-byte big-endian integers";
  const std::optional<PlainKeys> found = PlainKeys::from_first_key(k);
  if (!found) {
    throw Error(ErrorCode::dataset, fmt::format("{}: no stoker schema, and the first key {} is not sample index 0: {}",
                                                path, show_key(k.mv_data, k.mv_size), expect));
  }
  const PlainKeys keys = *found;
  plain = keys;
  // The first value decides the field: .npy arrays make a fixed field, anything else bytes.
  const std::span<const std::byte> first(static_cast<const std::byte*>(v.mv_data), v.mv_size);
  Field data = Field::bytes_field("data");
  std::uint64_t largest = 0;
  if (looks_like_npy(first)) {
    try {
      npy = parse_npy_header(first);
    } catch (const Error& e) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: sample 0 (key {}): {}", path, show_key(k.mv_data, k.mv_size), e.what()));
    }
    npy_prefix.assign(first.begin(), first.begin() + static_cast<std::ptrdiff_t>(npy->header_bytes));
    data = Field{"data", FieldKind::fixed, npy->dtype, npy->shape};
  }
  if (known) {
    full = *known;
  } else {
    // Every key, so that a missing index is found now and named, and the largest value measured
    // (the leaf pages only: a value's size is in its node, large values' own pages are not read).
    largest = scan_plain_keys(raw, k, v, keys, n, expect);
    full.num_samples = n;
    full.fields = {data};
  }
  if (!(full.fields.size() == 1 && full.fields[0] == data && full.num_samples == n)) {
    throw Error(ErrorCode::dataset, fmt::format("{}: the database changed after the loader opened it", path));
  }
  max_bytes.assign(1, data.is_bytes() ? largest : 0);
  plain_layout = fmt::format("LMDB without a stoker schema, {} samples: keys {}; values {}", n, keys.describe(),
                             npy ? fmt::format(".npy arrays, {}", data.describe()) : std::string("bytes"));
}

LmdbReader::LmdbReader(const std::string& path, const std::vector<std::string>& fields, bool sequential,
                       const Schema* known, std::string_view key_templates, std::string_view count_key)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.env = open_readonly(path, sequential);
  check_mdb(mdb_txn_begin(m.env.get(), nullptr, MDB_RDONLY, &m.txn), path + ": begin read transaction");
  m.txn_id = mdb_txn_id(m.txn);
  std::vector<std::uint64_t> stored_max;
  const bool has_schema = find_db(m.txn, kMetaDb, path).has_value();
  if (has_schema && !key_templates.empty()) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: has a stoker schema, which names its fields; {} is for databases without one", path,
                            detail::option_name("lmdb_keys")));
  }
  if (!key_templates.empty()) {
    check_mdb(mdb_dbi_open(m.txn, nullptr, 0, &m.samples), path + ": opening the main database");
    m.templated.emplace(TemplatedLayout::open(m.txn, m.samples, path, key_templates, count_key, known));
    m.full = m.templated->schema();
    stored_max = m.templated->max_bytes;
    m.plain_layout = m.templated->describe();
  } else if (!has_schema) {
    m.open_plain(m.txn, known);
    stored_max = m.max_bytes;
  } else {
    StoredSchema stored = read_stored_schema(m.txn, path);
    if (!stored.complete) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: incomplete database (an interrupted conversion?); finish it with "
                              "h5-to-lmdb --resume",
                              path));
    }
    if (stored.schema.num_samples == 0)
      throw Error(ErrorCode::dataset, fmt::format("{}: dataset is empty (0 samples)", path));
    m.full = stored.schema;
    stored_max = stored.max_bytes;
    m.samples = open_db(m.txn, kSamplesDb, path);
    MDB_stat st;
    check_mdb(mdb_stat(m.txn, m.samples, &st), path + ": stat of 'samples'");
    if (st.ms_entries != m.full.num_samples) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: sub-database 'samples' holds {} records but the schema says {} samples (damaged "
                              "database?)",
                              path, st.ms_entries, m.full.num_samples));
    }
    m.layout = std::make_unique<RecordLayout>(m.full);
  }
  m.selected = select_fields(m.full, fields, path);
  for (const auto& f : m.selected.fields) {
    const auto at =
        static_cast<std::size_t>(std::find(m.full.fields.begin(), m.full.fields.end(), f) - m.full.fields.begin());
    m.full_index.push_back(at);
  }
  m.max_bytes.clear();
  for (std::size_t at : m.full_index) m.max_bytes.push_back(at < stored_max.size() ? stored_max[at] : 0);
  // A handle opened in a read transaction survives only that transaction's commit; then one read
  // transaction is kept, reset between batches.
  int rc = mdb_txn_commit(std::exchange(m.txn, nullptr));
  check_mdb(rc, path + ": opening sub-databases");
  check_mdb(mdb_txn_begin(m.env.get(), nullptr, MDB_RDONLY, &m.txn), path + ": begin read transaction");
  mdb_txn_reset(m.txn);
  m.check_unchanged();  // the schema and keys read are the version recorded
}

std::uint64_t LmdbReader::version() const noexcept { return impl_->txn_id; }

LmdbReader::~LmdbReader() = default;

const Schema& LmdbReader::schema() const { return impl_->selected; }

SampleBound LmdbReader::sample_bound(std::size_t f) const {
  const std::uint64_t b = impl_->max_bytes.at(f);
  return {b, b > 0};
}

std::string LmdbReader::describe_layout() const { return impl_->plain_layout; }

std::map<std::string, std::string> LmdbReader::metadata() {
  const Impl& m = *impl_;
  std::map<std::string, std::string> out;
  LmdbTxn txn(m.env.get(), MDB_RDONLY, m.path + ": begin read transaction");
  const std::optional<MDB_dbi> meta = find_db(txn.get(), kMetaDb, m.path);
  if (!meta) return out;  // no stoker schema: nothing stored beside the samples
  MDB_cursor* raw = nullptr;
  check_mdb(mdb_cursor_open(txn.get(), *meta, &raw), m.path + ": reading sub-database 'stoker'");
  const std::unique_ptr<MDB_cursor, decltype(&mdb_cursor_close)> cursor(raw, &mdb_cursor_close);
  MetadataBounds bounds;
  MDB_val k, v;
  int rc = mdb_cursor_get(raw, &k, &v, MDB_FIRST);
  for (; rc == MDB_SUCCESS && !bounds.exhausted(out.size()); rc = mdb_cursor_get(raw, &k, &v, MDB_NEXT)) {
    const std::string_view key(static_cast<const char*>(k.mv_data), k.mv_size);
    if (!is_private_meta_key(key)) {
      bounds.add(out, key, std::string_view(static_cast<const char*>(v.mv_data), v.mv_size));
    }
  }
  if (rc != MDB_NOTFOUND && rc != MDB_SUCCESS) check_mdb(rc, m.path + ": reading sub-database 'stoker'");
  return out;
}

void LmdbReader::will_need(std::span<const std::uint64_t> indices) noexcept {
  Impl& m = *impl_;
  if (mdb_txn_renew(m.txn) != MDB_SUCCESS) return;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (std::uint64_t i : indices) {
    char keybuf[24];
    MDB_val key = m.key_of(i, keybuf), val;
    std::string templated;
    if (m.templated) {  // the first field's key: the others are written beside it
      try {
        templated = m.templated->key(0, i);
      } catch (...) {  // a hint only: no memory for the key, no hint
        break;
      }
      key = {templated.size(), templated.data()};
    }
    if (mdb_get(m.txn, m.samples, &key, &val) != MDB_SUCCESS) continue;  // read() reports it
    const auto begin = reinterpret_cast<std::uintptr_t>(val.mv_data) & ~(page - 1);
    const auto end = reinterpret_cast<std::uintptr_t>(val.mv_data) + val.mv_size;
    // The page that holds the record's first byte: an address of the map, computed, not invented.
    // NOLINTNEXTLINE(performance-no-int-to-ptr)
    (void)detail::Env::get().madvise(reinterpret_cast<void*>(begin), end - begin, MADV_WILLNEED);
  }
  mdb_txn_reset(m.txn);
}

void LmdbReader::Impl::read_records(std::span<const std::uint64_t> indices, std::span<const FieldOut> out) {
  Impl& m = *this;
  if (m.templated) {
    for (std::size_t f = 0; f < m.selected.fields.size(); ++f)
      m.templated->read(m.txn, m.samples, m.full_index[f], indices, out[f]);
    return;
  }
  const std::size_t nf = m.selected.fields.size();
  for (std::size_t k = 0; k < indices.size(); ++k) {
    char keybuf[24];
    MDB_val key = m.key_of(indices[k], keybuf), val;
    int rc = LmdbCalls::get().mdb_get(m.txn, m.samples, &key, &val);
    if (rc == MDB_NOTFOUND) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: sample {} (key {}) is missing", m.path, indices[k], m.key_text(indices[k])));
    }
    if (rc != MDB_SUCCESS)
      check_mdb(rc, fmt::format("{}: reading sample {}", m.path, indices[k]));  // hot path: format only on failure
    const std::span<const std::byte> rec(static_cast<const std::byte*>(val.mv_data), val.mv_size);
    if (m.plain) {
      if (!m.npy) {
        if (rec.size() > kMaxSampleBytes) throw Error(ErrorCode::dataset, m.too_large(indices[k], rec.size()));
        std::byte* at = out[0].bytes->append(rec.size());
        if (!rec.empty()) std::memcpy(at, rec.data(), rec.size());
        continue;
      }
      if (rec.size() != m.npy->header_bytes + m.npy->data_bytes ||
          std::memcmp(rec.data(), m.npy_prefix.data(), m.npy_prefix.size()) != 0) {
        std::string why;
        try {
          if (!looks_like_npy(rec)) throw Error(ErrorCode::dataset, "it is not a .npy array");
          const NpyHeader h = parse_npy_header(rec);
          why = h.header_bytes + h.data_bytes != rec.size()
                    ? fmt::format("its .npy header says {} bytes of data, the value holds {}", h.data_bytes,
                                  rec.size() - std::min(rec.size(), h.header_bytes))
                    : fmt::format("its .npy header ({}[{}]) differs from sample 0's, which made the field {}",
                                  dtype_name(h.dtype), fmt::join(h.shape, ","), m.full.fields[0].describe());
        } catch (const Error& e) {
          why = e.what();
        }
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: sample {} (key {}): {}", m.path, indices[k], m.key_text(indices[k]), why));
      }
      std::memcpy(out[0].fixed + k * m.npy->data_bytes, rec.data() + m.npy->header_bytes, m.npy->data_bytes);
      continue;
    }
    if (m.layout->variable() || rec.size() != m.layout->fixed_part()) {
      if (std::string why = m.layout->check(rec); !why.empty()) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: sample {} (key {:016x}) {}", m.path, indices[k], indices[k], why));
      }
    }
    for (std::size_t f = 0; f < nf; ++f) {
      const std::span<const std::byte> src = m.layout->field(rec, m.full_index[f]);
      std::byte* dst =
          m.selected.fields[f].is_bytes() ? out[f].bytes->append(src.size()) : out[f].fixed + k * src.size();
      if (!src.empty()) std::memcpy(dst, src.data(), src.size());
    }
  }
}

void LmdbReader::read(std::span<const std::uint64_t> indices, std::span<const FieldOut> out) {
  Impl& m = *impl_;
  m.check_unchanged();
  if (int rc = mdb_txn_renew(m.txn); rc != MDB_SUCCESS) {
    m.check_unchanged();  // MDB_MAP_RESIZED: a writer grew the map meanwhile
    check_mdb(rc, m.path + ": renew read transaction");
  }
  struct Reset {
    MDB_txn* t;
    ~Reset() { mdb_txn_reset(t); }
  } reset{m.txn};
  m.check_unchanged(mdb_txn_id(m.txn));  // a commit between the two
  try {
    m.read_records(indices, out);
  } catch (...) {
    // A record missing or damaged (a size that cannot be allocated, say) because the database was
    // written meanwhile: said as that.
    m.check_unchanged();
    throw;
  }
  // Nothing was written while the batch was read, so no page of it was reused: the meta page is
  // loaded after the records (a seqlock's second look).
#if !defined(__SANITIZE_THREAD__)  // TSan does not take fences (and x86, where it runs, needs none here)
  std::atomic_thread_fence(std::memory_order_acquire);
#endif
  m.check_unchanged();
}

}  // namespace stoker::formats
