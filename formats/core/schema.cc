#include "stoker/schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "stoker/error.h"

namespace stoker {

std::size_t Field::elements_per_sample() const noexcept {
  if (is_bytes()) return 0;
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::size_t Field::bytes_per_sample() const noexcept { return elements_per_sample() * dtype_size(dtype); }

// Names come from files: printed escaped (stoker::printable), as in every message that names a field.
std::string Field::describe() const {
  if (is_bytes() && dtype == DType::u8) return fmt::format("{}: bytes", printable(name));
  if (is_bytes()) return fmt::format("{}: variable-length {}", printable(name), dtype_name(dtype));
  return fmt::format("{}: {}[{}]", printable(name), dtype_name(dtype), fmt::join(shape, ","));
}

std::size_t Schema::bytes_per_sample() const noexcept {
  std::size_t n = 0;
  for (const auto& f : fields) n += f.bytes_per_sample();
  return n;
}

bool Schema::has_bytes_fields() const noexcept {
  for (const auto& f : fields) {
    if (f.is_bytes()) return true;
  }
  return false;
}

std::string Schema::describe_fields() const {
  std::string out;
  for (const auto& f : fields) out += (out.empty() ? "" : ", ") + f.describe();
  return out;
}

void Schema::validate(const std::string& context) const {
  if (fields.empty()) throw Error(ErrorCode::dataset, fmt::format("{}: the schema has no fields", context));
  if (fields.size() > kMaxFields) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: {} fields, more than the {} a schema may have", context, fields.size(), kMaxFields));
  }
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const Field& f = fields[i];
    if (f.name.empty()) throw Error(ErrorCode::dataset, fmt::format("{}: field {} has an empty name", context, i));
    if (f.name.find('\0') != std::string::npos) {
      // Cut at the NUL, it would be another name (or the same as another field's) wherever a C
      // string carries it: HDF5, a message, Python's dict of a batch.
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: field {} has a name that holds a NUL character ('{}'), which no field name may",
                              context, i, printable(f.name)));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (fields[j].name == f.name)
        throw Error(ErrorCode::dataset, fmt::format("{}: two fields are named '{}'", context, printable(f.name)));
    }
    if (f.is_bytes()) {
      if (!f.shape.empty()) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: field '{}' is of kind bytes and must have shape [] (it has [{}])", context,
                                printable(f.name), fmt::join(f.shape, ",")));
      }
      continue;
    }
    if (f.kind != FieldKind::fixed) {
      throw Error(ErrorCode::dataset, fmt::format("{}: field '{}' has an unknown kind {}", context, printable(f.name),
                                                  static_cast<int>(f.kind)));
    }
    // bytes = dtype size x every dimension, each step checked against the limit (so no overflow).
    std::uint64_t bytes = dtype_size(f.dtype);
    for (std::int64_t d : f.shape) {
      if (d < 1)
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: field '{}' has a dimension {} (at least 1)", context, printable(f.name), d));
      if (static_cast<std::uint64_t>(d) > kMaxSampleBytes / bytes) {
        throw Error(
            ErrorCode::dataset,
            fmt::format("{}: field '{}' ({}[{}]) would be more than {} bytes a sample, the most stoker "
                        "accepts (kMaxSampleBytes)",
                        context, printable(f.name), dtype_name(f.dtype), fmt::join(f.shape, ","), kMaxSampleBytes));
      }
      bytes *= static_cast<std::uint64_t>(d);
    }
    total += bytes;
    if (total > kMaxSampleBytes) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: a sample of all fields would be more than {} bytes (at field '{}'), the most "
                              "stoker accepts (kMaxSampleBytes)",
                              context, kMaxSampleBytes, printable(f.name)));
    }
  }
}

const Field* Schema::find(std::string_view name) const noexcept {
  for (const auto& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace stoker
