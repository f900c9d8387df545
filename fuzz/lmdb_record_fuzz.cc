// LMDB records of both layout versions and the keys of databases without a schema: the first
// byte picks a schema, the rest is a record (and, read as a key, a foreign key).
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "formats/lmdb/lmdb_keys.h"
#include "formats/lmdb/lmdb_record.h"

namespace {

std::vector<stoker::Schema> schemas() {
  using stoker::DType;
  using stoker::Field;
  using stoker::FieldKind;
  std::vector<stoker::Schema> out(4);
  out[0].fields = {Field{"image", FieldKind::fixed, DType::u8, {3, 4, 4}},
                   Field{"label", FieldKind::fixed, DType::i64, {}}};
  out[1].fields = {Field::bytes_field("jpeg"), Field{"label", FieldKind::fixed, DType::i64, {}}};
  out[2].fields = {Field::bytes_field("a"), Field::bytes_field("b"), Field::bytes_field("c")};
  out[3].fields = {Field{"x", FieldKind::fixed, DType::f32, {2}}, Field::bytes_field("y")};
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<stoker::Schema> kSchemas = schemas();
  if (size == 0) return 0;
  const stoker::Schema& schema = kSchemas[data[0] % kSchemas.size()];
  const stoker::formats::RecordLayout layout(schema);
  const std::span<const std::byte> record(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  if (layout.check(record).empty()) {
    std::size_t total = 0;
    std::vector<std::span<const std::byte>> parts;
    for (std::size_t f = 0; f < schema.fields.size(); ++f) {
      const auto part = layout.field(record, f);
      if (part.data() < record.data() || part.data() + part.size() > record.data() + record.size()) __builtin_trap();
      total += part.size();
      parts.push_back(part);
    }
    // A well-formed record is exactly its fields and lengths, and re-encodes to itself.
    if (total > record.size()) __builtin_trap();
    std::vector<std::byte> again;
    layout.encode(parts, again);
    if (again.size() != record.size() || !std::equal(again.begin(), again.end(), record.begin())) __builtin_trap();
  }
  MDB_val key{size - 1, const_cast<std::uint8_t*>(data + 1)};
  if (auto keys = stoker::formats::PlainKeys::from_first_key(key)) {
    char buf[24];
    for (std::uint64_t i : {std::uint64_t{0}, std::uint64_t{17}, UINT64_MAX / 2, UINT64_MAX}) {
      const MDB_val k = keys->key(i, buf);
      if (k.mv_size > sizeof buf) __builtin_trap();
      const auto back = keys->parse(k);
      if (back && *back != i) __builtin_trap();
    }
  }
  stoker::formats::PlainKeys decimal;
  (void)decimal.parse(key);
  (void)stoker::formats::show_key(data, size);
  return 0;
}
