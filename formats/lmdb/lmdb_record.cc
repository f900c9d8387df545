#include "formats/lmdb/lmdb_record.h"

#include <fmt/format.h>

#include <cstring>

namespace stoker::formats {
namespace {

std::uint64_t load_le64(const std::byte* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);  // the host is little-endian (static_assert in digest.cc)
  return v;
}

}  // namespace

RecordLayout::RecordLayout(const Schema& schema) : schema_(&schema) {
  for (const auto& f : schema.fields) {
    if (f.is_bytes()) {
      position_.push_back(bytes_fields_++);
    } else {
      position_.push_back(fixed_bytes_);
      fixed_bytes_ += f.bytes_per_sample();
    }
  }
}

std::span<const std::byte> RecordLayout::field(std::span<const std::byte> record, std::size_t f) const noexcept {
  const Field& field = schema_->fields[f];
  if (!field.is_bytes()) return record.subspan(position_[f], field.bytes_per_sample());
  std::size_t at = fixed_part();
  const std::byte* lengths = record.data() + fixed_bytes_;
  for (std::size_t k = 0; k < position_[f]; ++k) at += load_le64(lengths + 8 * k);
  return record.subspan(at, load_le64(lengths + 8 * position_[f]));
}

std::string RecordLayout::check(std::span<const std::byte> record) const {
  if (!variable()) {
    if (record.size() == fixed_bytes_) return {};
    return fmt::format("has {} bytes, the schema says {} ({})", record.size(), fixed_bytes_,
                       schema_->describe_fields());
  }
  if (record.size() < fixed_part()) {
    return fmt::format("has {} bytes, less than the {} of its fixed fields and {} length(s) ({})", record.size(),
                       fixed_part(), bytes_fields_, schema_->describe_fields());
  }
  std::uint64_t total = fixed_part();
  for (std::size_t k = 0; k < bytes_fields_; ++k) {
    const std::uint64_t n = load_le64(record.data() + fixed_bytes_ + 8 * k);
    if (n > record.size() - total) {
      return fmt::format("has {} bytes, but its bytes field lengths add up to more ({} at length {})", record.size(),
                         total + n, k);
    }
    total += n;
  }
  if (total != record.size()) {
    return fmt::format("has {} bytes, but its fields and lengths account for {}", record.size(), total);
  }
  return {};
}

void RecordLayout::encode(std::span<const std::span<const std::byte>> fields, std::vector<std::byte>& out) const {
  const std::size_t start = out.size();
  std::size_t var = 0;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (schema_->fields[f].is_bytes()) var += fields[f].size();
  }
  out.resize(start + fixed_part() + var);
  std::byte* base = out.data() + start;
  std::size_t at = fixed_part();
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (!schema_->fields[f].is_bytes()) {
      std::memcpy(base + position_[f], fields[f].data(), fields[f].size());
      continue;
    }
    const std::uint64_t n = fields[f].size();
    std::memcpy(base + fixed_bytes_ + 8 * position_[f], &n, 8);
    if (n) std::memcpy(base + at, fields[f].data(), n);
    at += n;
  }
}

}  // namespace stoker::formats
