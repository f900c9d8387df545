// stoker/schema.h: what a dataset holds.
//
// A dataset is num_samples samples; every sample has the same named fields. A field of kind
// `fixed` has one dtype and one shape for all samples, so a batch of B samples holds it as one
// C-order array [B, shape...]. A field of kind `bytes` holds a run of elements of any length per
// sample (an encoded image's bytes, a variable-length record, a text's token ids): a batch holds it
// as one buffer plus B+1 offsets (stoker/batch.h). Its dtype is its elements': u8 for bytes, or
// another (h5py's vlen_dtype(np.int32) arrives as i32), each sample a whole number of them. Plain
// values; not synchronised.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/export.h"

namespace stoker {

enum class FieldKind : std::uint8_t {
  fixed = 0,  // fixed dtype and shape
  bytes = 1,  // variable length: shape {}, any number of elements of its dtype (u8: bytes) per sample
};

struct STOKER_API Field {
  std::string name;
  FieldKind kind = FieldKind::fixed;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;  // per sample, without the batch dimension; {} for a scalar

  // Fixed fields; 0 for a bytes field, whose size varies per sample.
  std::size_t elements_per_sample() const noexcept;
  std::size_t bytes_per_sample() const noexcept;
  bool is_bytes() const noexcept { return kind == FieldKind::bytes; }
  // "image: u8[3,32,32]", "jpeg: bytes", "tokens: variable-length i32"
  std::string describe() const;

  static Field bytes_field(std::string name, DType elements = DType::u8) {
    return Field{std::move(name), FieldKind::bytes, elements, {}};
  }
  bool operator==(const Field&) const = default;
};

// The most one sample (all its fields together) may hold, and the most fields a schema may have.
// Sizes read from a file or a schema (dimensions, counts) are checked against these with overflow
// checks before anything is allocated or copied, so that no file can make stoker allocate more.
inline constexpr std::uint64_t kMaxSampleBytes = std::uint64_t{1} << 30;  // 1 GiB
inline constexpr std::size_t kMaxFields = 1024;

struct STOKER_API Schema {
  std::uint64_t num_samples = 0;
  std::vector<Field> fields;  // in storage / delivery order

  // The fixed fields' bytes of one sample (bytes fields add their own length).
  std::size_t bytes_per_sample() const noexcept;
  bool has_bytes_fields() const noexcept;
  // "image: u8[3,32,32], label: i64[]"
  std::string describe_fields() const;
  // nullptr when there is no such field.
  const Field* find(std::string_view name) const noexcept;

  // Throws stoker::Error, prefixed with `context` (the file), for a schema stoker must not trust:
  // no fields, more than kMaxFields, an empty or repeated field name or one holding a NUL
  // character, a dimension below 1, a sample larger than kMaxSampleBytes (sizes computed with
  // overflow checks), or a bytes field with a shape (it has none).
  void validate(const std::string& context) const;
  bool operator==(const Schema&) const = default;
};

}  // namespace stoker
