// A record of stoker's LMDB layout (docs/lmdb-layout.md): the fixed fields' bytes in schema order,
// then, when the schema has bytes fields, one little-endian u64 length per bytes field (schema
// order), then those fields' bytes back to back. With no bytes field it is version 1's record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stoker/schema.h"

namespace stoker::formats {

class RecordLayout {
 public:
  explicit RecordLayout(const Schema& schema);

  // A record of exactly this many bytes when there is no bytes field; the least otherwise.
  std::size_t fixed_part() const noexcept { return fixed_bytes_ + 8 * bytes_fields_; }
  bool variable() const noexcept { return bytes_fields_ > 0; }

  // Field f of `record`, whose size has been checked by check(). For a fixed field its
  // bytes_per_sample() bytes; for a bytes field its sample.
  std::span<const std::byte> field(std::span<const std::byte> record, std::size_t f) const noexcept;
  // "" when `record` is well formed, else why not ("has 7 bytes, ...").
  std::string check(std::span<const std::byte> record) const;
  // Appends a record made of one span per field (a fixed field's span has its bytes_per_sample()).
  void encode(std::span<const std::span<const std::byte>> fields, std::vector<std::byte>& out) const;

 private:
  const Schema* schema_;
  std::size_t fixed_bytes_ = 0;
  std::size_t bytes_fields_ = 0;
  std::vector<std::size_t> position_;  // per field: offset in the fixed part, or ordinal among bytes fields
};

}  // namespace stoker::formats
