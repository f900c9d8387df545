#include "formats/core/npy_header.h"

#include <fmt/format.h>

#include <cstring>
#include <string_view>

#include "stoker/error.h"
#include "stoker/schema.h"

namespace stoker::formats {
namespace {

constexpr char kMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

// The text after `key`'s colon in the dict literal, or npos.
std::size_t value_of(std::string_view dict, std::string_view key) {
  for (const char quote : {'\'', '"'}) {
    const std::string quoted = fmt::format("{}{}{}", quote, key, quote);
    const auto at = dict.find(quoted);
    if (at == std::string_view::npos) continue;
    const auto colon = dict.find(':', at + quoted.size());
    if (colon == std::string_view::npos) return std::string_view::npos;
    auto v = colon + 1;
    while (v < dict.size() && dict[v] == ' ') ++v;
    return v;
  }
  return std::string_view::npos;
}

std::optional<DType> dtype_of_descr(std::string_view d) {
  if (d.size() < 3) return std::nullopt;
  const char order = d[0];
  const std::string_view code = d.substr(1);
  const bool one_byte = code == "u1" || code == "i1" || code == "b1";
  if (!(order == '<' || order == '|' || (order == '=' && one_byte))) return std::nullopt;  // '>': big-endian
  if (code == "u1") return DType::u8;
  if (code == "i1") return DType::i8;
  if (code == "b1") return DType::b8;
  if (code == "u2") return DType::u16;
  if (code == "i2") return DType::i16;
  if (code == "u4") return DType::u32;
  if (code == "i4") return DType::i32;
  if (code == "u8") return DType::u64;
  if (code == "i8") return DType::i64;
  if (code == "f2") return DType::f16;
  if (code == "f4") return DType::f32;
  if (code == "f8") return DType::f64;
  return std::nullopt;
}

}  // namespace

bool looks_like_npy(std::span<const std::byte> value) noexcept {
  return value.size() >= 10 && std::memcmp(value.data(), kMagic, sizeof kMagic) == 0;
}

NpyHeader parse_npy_header(std::span<const std::byte> value) {
  const auto* p = reinterpret_cast<const unsigned char*>(value.data());
  const unsigned major = p[6];
  std::size_t len_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  if (len_bytes == 0) {
    throw Error(ErrorCode::dataset,
                fmt::format(".npy format version {}.{} is not one stoker reads (1, 2 or 3)", major, p[7]));
  }
  if (value.size() < 8 + len_bytes) throw Error(ErrorCode::dataset, ".npy header is truncated");
  std::size_t dict_len = p[8] | (p[9] << 8);
  if (len_bytes == 4) dict_len |= (std::size_t{p[10]} << 16) | (std::size_t{p[11]} << 24);
  NpyHeader h;
  h.header_bytes = 8 + len_bytes + dict_len;
  if (h.header_bytes > value.size()) {
    throw Error(ErrorCode::dataset,
                fmt::format(".npy header says it is {} bytes long, the value has {}", h.header_bytes, value.size()));
  }
  const std::string_view dict(reinterpret_cast<const char*>(p) + 8 + len_bytes, dict_len);
  const auto descr_at = value_of(dict, "descr");
  if (descr_at == std::string_view::npos || descr_at >= dict.size() ||
      (dict[descr_at] != '\'' && dict[descr_at] != '"')) {
    throw Error(ErrorCode::dataset, fmt::format(".npy header has no 'descr' string: {}", dict));
  }
  const auto descr_end = dict.find(dict[descr_at], descr_at + 1);
  if (descr_end == std::string_view::npos)
    throw Error(ErrorCode::dataset, fmt::format(".npy header is malformed: {}", dict));
  const std::string_view descr = dict.substr(descr_at + 1, descr_end - descr_at - 1);
  const auto dtype = dtype_of_descr(descr);
  if (!dtype) {
    throw Error(ErrorCode::dataset,
                fmt::format(".npy dtype '{}' is not one stoker delivers (little-endian bool, u8 .. u64, i8 .. i64, "
                            "f16, f32, f64)",
                            descr));
  }
  h.dtype = *dtype;
  const auto fortran_at = value_of(dict, "fortran_order");
  if (fortran_at == std::string_view::npos)
    throw Error(ErrorCode::dataset, fmt::format(".npy header has no 'fortran_order': {}", dict));
  if (dict.substr(fortran_at, 4) == "True")
    throw Error(ErrorCode::dataset, ".npy array is in Fortran order; stoker delivers C order");
  const auto shape_at = value_of(dict, "shape");
  if (shape_at == std::string_view::npos || shape_at >= dict.size() || dict[shape_at] != '(') {
    throw Error(ErrorCode::dataset, fmt::format(".npy header has no 'shape' tuple: {}", dict));
  }
  const auto shape_end = dict.find(')', shape_at);
  if (shape_end == std::string_view::npos)
    throw Error(ErrorCode::dataset, fmt::format(".npy header is malformed: {}", dict));
  std::uint64_t bytes = dtype_size(h.dtype);
  for (std::size_t i = shape_at + 1; i < shape_end;) {
    while (i < shape_end && (dict[i] == ' ' || dict[i] == ',')) ++i;
    if (i >= shape_end) break;
    std::uint64_t d = 0;
    std::size_t digits = 0;
    while (i < shape_end && dict[i] >= '0' && dict[i] <= '9') {
      d = d * 10 + static_cast<unsigned>(dict[i] - '0');
      if (d > kMaxSampleBytes) break;
      ++i, ++digits;
    }
    if (digits == 0 || (i < shape_end && dict[i] != ',' && dict[i] != ' ')) {
      throw Error(ErrorCode::dataset,
                  fmt::format(".npy shape is malformed: {}", dict.substr(shape_at, shape_end - shape_at + 1)));
    }
    if (d == 0 || d > kMaxSampleBytes / bytes) {
      throw Error(ErrorCode::dataset,
                  fmt::format(".npy shape {} is empty or larger than a sample may be ({} bytes, kMaxSampleBytes)",
                              dict.substr(shape_at, shape_end - shape_at + 1), kMaxSampleBytes));
    }
    bytes *= d;
    h.shape.push_back(static_cast<std::int64_t>(d));
  }
  h.data_bytes = bytes;
  return h;
}

}  // namespace stoker::formats
