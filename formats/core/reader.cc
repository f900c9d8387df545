#include "formats/core/reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "base/utf8.h"
#include "stoker/error.h"

namespace stoker::formats {

std::byte* VarBytes::append(std::size_t n) {
  if (n > capacity_ - size_) {
    // Doubling keeps a warm reader allocation-free; the limit keeps a hostile length from
    // asking for more than a sample may hold.
    if (n > kMaxSampleBytes) {
      throw Error(ErrorCode::dataset,
                  fmt::format("a sample of {} bytes is more than {} (kMaxSampleBytes)", n, kMaxSampleBytes));
    }
    const std::size_t want = std::max({size_ + n, capacity_ * 2, std::size_t{64} << 10});
    if (owned_capacity_ < want) {
      auto grown = std::make_unique_for_overwrite<std::byte[]>(want);
      if (size_) std::memcpy(grown.get(), base_, size_);
      owned_ = std::move(grown);
      owned_capacity_ = want;
    } else if (size_) {
      std::memcpy(owned_.get(), base_, size_);  // out of a lent buffer into its own, large enough
    }
    base_ = owned_.get();
    capacity_ = owned_capacity_;
  }
  std::byte* at = base_ + size_;
  size_ += n;
  offsets_.push_back(size_);
  return at;
}

void MetadataBounds::add(std::map<std::string, std::string>& out, std::string_view name, std::string_view value) {
  if (!detail::is_utf8(name) || !detail::is_utf8(value)) return;
  std::size_t bytes = 0;
  for (const std::string_view text : {name, value}) {
    for (const char c : text) {
      const auto u = static_cast<unsigned char>(c);
      bytes += u < 0x20 ? 6 : (c == '"' || c == '\\') ? 2 : 1;
    }
  }
  const auto known = out.find(std::string(name));
  if (!may_fit(bytes) || (known == out.end() && out.size() == kMaxMetadataEntries)) return;
  used_ += bytes;  // a replaced value's bytes stay counted: a bound, not an account
  if (known != out.end()) {
    known->second = value;
  } else {
    out.emplace(name, value);
  }
}

void Reader::read(std::span<const std::uint64_t> indices, std::span<std::byte* const> dest) {
  std::vector<FieldOut> out(dest.size());
  for (std::size_t f = 0; f < dest.size(); ++f) {
    if (schema().fields.at(f).is_bytes()) {
      throw Error(ErrorCode::dataset, fmt::format("field '{}' is of kind bytes: read it into a VarBytes",
                                                  printable(schema().fields[f].name)));
    }
    out[f].fixed = dest[f];
  }
  read(indices, std::span<const FieldOut>(out));
}

SampleBound Reader::sample_bound(std::size_t) const { return {}; }

std::uint64_t Reader::locality_rows() const {
  const std::size_t bytes = std::max<std::size_t>(schema().bytes_per_sample(), 1);
  return std::max<std::uint64_t>(1, (64u << 10) / bytes);
}
Schema select_fields(const Schema& available, const std::vector<std::string>& wanted, const std::string& path) {
  Schema out;
  out.num_samples = available.num_samples;
  if (wanted.empty()) {
    out.fields = available.fields;
    std::sort(out.fields.begin(), out.fields.end(), [](const Field& a, const Field& b) { return a.name < b.name; });
    return out;
  }
  for (const auto& name : wanted) {
    const Field* f = available.find(name);
    if (!f) {
      std::vector<std::string> names;
      for (const auto& g : available.fields) names.push_back(printable(g.name));
      throw Error(ErrorCode::invalid_option,
                  fmt::format("{}: unknown field '{}' (fields: {})", path, printable(name), fmt::join(names, ", ")));
    }
    if (out.find(name))
      throw Error(ErrorCode::invalid_option, fmt::format("{}: field '{}' is selected twice", path, printable(name)));
    out.fields.push_back(*f);
  }
  return out;
}

}  // namespace stoker::formats
