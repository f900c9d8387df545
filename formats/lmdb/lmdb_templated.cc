#include "formats/lmdb/lmdb_templated.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "base/option_spelling.h"
#include "base/progress_note.h"
#include "formats/lmdb/lmdb_calls.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_keys.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

std::string shown(const std::string& key) { return show_key(key.data(), key.size()); }

std::string too_large(const std::string& path, std::uint64_t i, const std::string& key, std::size_t bytes) {
  return fmt::format("{}: sample {} (key {}) holds {} bytes, more than a sample may ({} bytes, kMaxSampleBytes)", path,
                     i, shown(key), bytes, kMaxSampleBytes);
}

}  // namespace

std::string TemplatedLayout::key(std::size_t t, std::uint64_t sample) const {
  std::vector<char> buf(templates_[t].prefix.size() + templates_[t].suffix.size() + 24);
  return {buf.data(), templates_[t].key(sample + base_, buf.data())};
}

Schema TemplatedLayout::schema() const {
  Schema s;
  s.num_samples = num_samples_;
  for (const auto& t : templates_) s.fields.push_back(t.as_field());
  return s;
}

std::string TemplatedLayout::describe() const {
  std::vector<std::string> parts;
  for (const auto& t : templates_)
    parts.push_back(fmt::format("{} = {} ({})", t.field, t.text(), t.bytes ? "bytes" : dtype_name(t.dtype)));
  return fmt::format("LMDB without a stoker schema, {} samples, one key per field from index {}: {}", num_samples_,
                     base_, fmt::join(parts, ", "));
}

void TemplatedLayout::find_base(MDB_txn* txn, MDB_dbi dbi) {
  for (std::uint64_t b : {0, 1}) {
    base_ = b;
    std::string k = key(0, 0);
    MDB_val mk{k.size(), k.data()}, val;
    const int rc = LmdbCalls::get().mdb_get(txn, dbi, &mk, &val);
    if (rc == MDB_SUCCESS) return;
    if (rc != MDB_NOTFOUND) check_mdb(rc, path_ + ": reading key " + shown(k));
  }
  base_ = 0;
  throw Error(ErrorCode::dataset,
              fmt::format("{}: has neither key {} nor {}: the first sample of {}'s first field (index 0 or 1)", path_,
                          shown(key(0, 0)), shown(key(0, 1)), detail::option_name("lmdb_keys")));
}

// Every key once (the leaf pages: a value's size is in its node): each template's keys must be
// indices base .. base + N - 1, N the first template's count.
void TemplatedLayout::scan(MDB_txn* txn, MDB_dbi dbi) {
  MDB_stat st;
  check_mdb(mdb_stat(txn, dbi, &st), path_ + ": stat");
  const std::uint64_t entries = st.ms_entries;
  check_entries_fit(txn, entries, path_);  // before a bit per entry and template is allocated
  std::vector<std::vector<bool>> seen(templates_.size(), std::vector<bool>(entries, false));
  std::vector<std::uint64_t> count(templates_.size(), 0);
  max_bytes.assign(templates_.size(), 0);
  MDB_cursor* raw = nullptr;
  check_mdb(mdb_cursor_open(txn, dbi, &raw), path_ + ": cursor");
  std::unique_ptr<MDB_cursor, void (*)(MDB_cursor*)> cursor(raw, mdb_cursor_close);
  MDB_val k, v;
  int rc = LmdbCalls::get().mdb_cursor_get(raw, &k, &v, MDB_FIRST);
  for (std::uint64_t scanned = 0; rc == MDB_SUCCESS;
       rc = LmdbCalls::get().mdb_cursor_get(raw, &k, &v, MDB_NEXT), ++scanned) {
    // Progress, for the probe's watch (base/progress_note.h); bounded, as such loops must be:
    // pages that lead back to themselves would otherwise be a scan that never ends.
    detail::note_progress();
    if (scanned >= entries) {
      throw Error(ErrorCode::dataset, fmt::format("{}: its pages hold more keys than the {} it counts: the database "
                                                  "is damaged",
                                                  path_, entries));
    }
    const std::string_view name(static_cast<const char*>(k.mv_data), k.mv_size);
    for (std::size_t f = 0; f < templates_.size(); ++f) {
      const auto i = templates_[f].parse(name);
      if (!i) continue;
      if (*i < base_ || *i - base_ >= entries) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: key {} has index {}, outside {} .. {} (the database holds {} keys)", path_,
                                show_key(k.mv_data, k.mv_size), *i, base_, base_ + entries - 1, entries));
      }
      if (v.mv_size > kMaxSampleBytes)
        throw Error(ErrorCode::dataset, too_large(path_, *i - base_, std::string(name), v.mv_size));
      seen[f][*i - base_] = true;
      ++count[f];
      max_bytes[f] = std::max<std::uint64_t>(max_bytes[f], v.mv_size);
      break;
    }
  }
  if (rc != MDB_NOTFOUND) check_mdb(rc, path_ + ": scanning the keys");
  const std::uint64_t n = count[0];
  const auto mismatch = [&](std::size_t f, std::uint64_t i, const char* what) {
    return Error(ErrorCode::dataset,
                 fmt::format("{}: sample {} field '{}': key {} is {}: the first field ({}) has {} keys, from index "
                             "{}, and every field must have the same",
                             path_, i, templates_[f].field, shown(key(f, i)), what, templates_[0].text(), n, base_));
  };
  for (std::size_t f = 0; f < templates_.size(); ++f) {
    for (std::uint64_t i = 0; i < n; ++i) {
      if (!seen[f][i]) throw mismatch(f, i, "missing");
    }
    if (count[f] > n) {  // a key of this field past the first field's last: the first one named
      for (std::uint64_t i = n; i < entries; ++i) {
        if (seen[f][i]) throw mismatch(f, i, "there");
      }
    }
  }
  num_samples_ = n;
}

TemplatedLayout TemplatedLayout::open(MDB_txn* txn, MDB_dbi dbi, const std::string& path, std::string_view templates,
                                      std::string_view count_key, const Schema* known) {
  TemplatedLayout t;
  t.path_ = path;
  t.templates_ = parse_key_templates(templates);
  t.find_base(txn, dbi);
  if (known) {
    // The fields the loader's process selected, found again (a worker does not scan the keys again).
    const Schema mine = t.schema();
    for (const Field& f : known->fields) {
      if (std::find(mine.fields.begin(), mine.fields.end(), f) == mine.fields.end())
        throw Error(ErrorCode::dataset, fmt::format("{}: the database changed after the loader opened it", path));
    }
    t.num_samples_ = known->num_samples;
    t.max_bytes.assign(t.templates_.size(), 0);
  } else {
    t.scan(txn, dbi);
  }
  if (!count_key.empty()) {
    MDB_val mk{count_key.size(), const_cast<char*>(count_key.data())}, val;
    const int rc = LmdbCalls::get().mdb_get(txn, dbi, &mk, &val);
    if (rc == MDB_NOTFOUND)
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: has no key '{}' ({})", path, count_key, detail::option_name("lmdb_count_key")));
    check_mdb(rc, fmt::format("{}: reading key '{}'", path, count_key));
    std::uint64_t said = 0;
    if (!parse_number_value({static_cast<const std::byte*>(val.mv_data), val.mv_size}, DType::u64,
                            reinterpret_cast<std::byte*>(&said)) ||
        said != t.num_samples_) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: key '{}' holds {}, but the keys of {} make {} samples", path, count_key,
                              show_key(val.mv_data, val.mv_size), t.templates_[0].text(), t.num_samples_));
    }
  }
  if (t.num_samples_ == 0) throw Error(ErrorCode::dataset, fmt::format("{}: dataset is empty (0 samples)", path));
  return t;
}

void TemplatedLayout::read(MDB_txn* txn, MDB_dbi dbi, std::size_t t, std::span<const std::uint64_t> indices,
                           const FieldOut& out) const {
  const KeyTemplate& tp = templates_[t];
  std::vector<char> buf(tp.prefix.size() + tp.suffix.size() + 24);
  const std::size_t bytes = tp.bytes ? 0 : dtype_size(tp.dtype);
  for (std::size_t k = 0; k < indices.size(); ++k) {
    MDB_val mk{tp.key(indices[k] + base_, buf.data()), buf.data()}, val;
    const int rc = LmdbCalls::get().mdb_get(txn, dbi, &mk, &val);
    if (rc == MDB_NOTFOUND)
      throw Error(ErrorCode::dataset, fmt::format("{}: sample {} field '{}': key {} is missing", path_, indices[k],
                                                  tp.field, show_key(mk.mv_data, mk.mv_size)));
    if (rc != MDB_SUCCESS) check_mdb(rc, fmt::format("{}: reading sample {}", path_, indices[k]));
    const std::span<const std::byte> value(static_cast<const std::byte*>(val.mv_data), val.mv_size);
    if (tp.bytes) {
      if (value.size() > kMaxSampleBytes)
        throw Error(ErrorCode::dataset,
                    too_large(path_, indices[k], std::string(buf.data(), mk.mv_size), value.size()));
      std::byte* at = out.bytes->append(value.size());
      if (!value.empty()) std::memcpy(at, value.data(), value.size());
    } else if (!parse_number_value(value, tp.dtype, out.fixed + k * bytes)) {
      const std::string_view type = dtype_name(tp.dtype);  // "an i32", "an f32", "a u8"
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: sample {} field '{}': key {} holds {}, not {} {} number", path_, indices[k],
                              tp.field, show_key(mk.mv_data, mk.mv_size), show_key(val.mv_data, val.mv_size),
                              type[0] == 'i' || type[0] == 'f' ? "an" : "a", type));
    }
  }
}

}  // namespace stoker::formats
