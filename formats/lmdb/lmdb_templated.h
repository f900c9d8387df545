// Reading a database without a stoker schema whose sample is one key per field (Options::lmdb_keys,
// formats/lmdb/lmdb_key_templates.h): where its samples start, how many there are, and their fields.
#pragma once

#include <lmdb.h>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/core/reader.h"
#include "formats/lmdb/lmdb_key_templates.h"
#include "stoker/schema.h"

namespace stoker::formats {

class TemplatedLayout {
 public:
  // Parses the templates and finds sample 0's key index (0, or 1). Without `known` (the schema the
  // loader's process found), scans every key once: each template's keys must be the indices of the
  // first template's, and no value may exceed a sample (each error names the key). `count_key`,
  // when not empty, names a key whose decimal value must equal the count.
  static TemplatedLayout open(MDB_txn* txn, MDB_dbi dbi, const std::string& path, std::string_view templates,
                              std::string_view count_key, const Schema* known);

  // The fields, one per template in its order; num_samples.
  Schema schema() const;
  // "LMDB without a stoker schema, 57 samples, one key per field from index 1: image = image-{:09d} (bytes), ..."
  std::string describe() const;
  // The key of template t for sample i.
  std::string key(std::size_t t, std::uint64_t sample) const;
  // Appends template t's field of `indices` to `out` (a bytes field's) or writes it (a number's).
  void read(MDB_txn* txn, MDB_dbi dbi, std::size_t t, std::span<const std::uint64_t> indices,
            const FieldOut& out) const;

  std::vector<std::uint64_t> max_bytes;  // per template: its largest value (0 unknown: a worker's open)

 private:
  void find_base(MDB_txn* txn, MDB_dbi dbi);
  void scan(MDB_txn* txn, MDB_dbi dbi);

  std::string path_;
  std::vector<KeyTemplate> templates_;
  std::uint64_t base_ = 0, num_samples_ = 0;
};

}  // namespace stoker::formats
