#include "formats/core/npy.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
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

// NumPy's little-endian descriptors of stoker's dtypes; one byte types also as '|'.
struct Descr {
  DType dtype;
  std::string_view code;  // after the byte-order character
};
constexpr Descr kDescrs[] = {{DType::u8, "u1"},  {DType::i8, "i1"},  {DType::b8, "b1"},  {DType::u16, "u2"},
                             {DType::i16, "i2"}, {DType::u32, "u4"}, {DType::i32, "i4"}, {DType::u64, "u8"},
                             {DType::i64, "i8"}, {DType::f16, "f2"}, {DType::f32, "f4"}, {DType::f64, "f8"}};

std::optional<DType> dtype_of_descr(std::string_view d) {
  if (d.size() < 3) return std::nullopt;
  const char order = d[0];
  const std::string_view code = d.substr(1);
  const bool one_byte = code == "u1" || code == "i1" || code == "b1";
  if (!(order == '<' || order == '|' || (order == '=' && one_byte))) return std::nullopt;  // '>': big-endian
  for (const Descr& x : kDescrs) {
    if (x.code == code) return x.dtype;
  }
  return std::nullopt;
}

std::string descr_of(DType t) {
  if (t == DType::bf16) return "<u2";  // NumPy has no bfloat16: the raw 16 bits
  for (const Descr& x : kDescrs) {
    if (x.dtype == t) return fmt::format("{}{}", dtype_size(t) == 1 ? '|' : '<', x.code);
  }
  return "|u1";
}

}  // namespace

bool looks_like_npy(std::span<const std::byte> value) noexcept {
  return value.size() >= 10 && std::memcmp(value.data(), kMagic, sizeof kMagic) == 0;
}

namespace {

// The header's dict literal; `header_bytes` gets where the data starts.
std::string_view dict_of(std::span<const std::byte> value, std::size_t& header_bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(value.data());
  const unsigned major = p[6];
  const std::size_t len_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  if (len_bytes == 0) {
    throw Error(ErrorCode::dataset,
                fmt::format(".npy format version {}.{} is not one stoker reads (1, 2 or 3)", major, p[7]));
  }
  if (value.size() < 8 + len_bytes) throw Error(ErrorCode::dataset, ".npy header is truncated");
  std::size_t dict_len = p[8] | (p[9] << 8);
  if (len_bytes == 4) dict_len |= (std::size_t{p[10]} << 16) | (std::size_t{p[11]} << 24);
  header_bytes = 8 + len_bytes + dict_len;
  if (header_bytes > value.size()) {
    throw Error(ErrorCode::dataset,
                fmt::format(".npy header says it is {} bytes long, the value has {}", header_bytes, value.size()));
  }
  return {reinterpret_cast<const char*>(p) + 8 + len_bytes, dict_len};
}

DType descr_in(std::string_view dict) {
  const auto at = value_of(dict, "descr");
  if (at == std::string_view::npos || at >= dict.size() || (dict[at] != '\'' && dict[at] != '"')) {
    throw Error(ErrorCode::dataset, fmt::format(".npy header has no 'descr' string: {}", dict));
  }
  const auto end = dict.find(dict[at], at + 1);
  if (end == std::string_view::npos) throw Error(ErrorCode::dataset, fmt::format(".npy header is malformed: {}", dict));
  const std::string_view descr = dict.substr(at + 1, end - at - 1);
  const auto dtype = dtype_of_descr(descr);
  if (!dtype) {
    throw Error(ErrorCode::dataset,
                fmt::format(".npy dtype '{}' is not one stoker delivers (little-endian bool, u8 .. u64, i8 .. i64, "
                            "f16, f32, f64)",
                            descr));
  }
  return *dtype;
}

// The shape's dimensions, each checked so that their product (times `element` bytes) stays within
// a sample's limit; returns that product.
std::uint64_t shape_in(std::string_view dict, std::size_t element, std::vector<std::int64_t>& shape) {
  const auto at = value_of(dict, "shape");
  if (at == std::string_view::npos || at >= dict.size() || dict[at] != '(') {
    throw Error(ErrorCode::dataset, fmt::format(".npy header has no 'shape' tuple: {}", dict));
  }
  const auto end = dict.find(')', at);
  if (end == std::string_view::npos) throw Error(ErrorCode::dataset, fmt::format(".npy header is malformed: {}", dict));
  const std::string_view text = dict.substr(at, end - at + 1);
  std::uint64_t bytes = element;
  for (std::size_t i = at + 1; i < end;) {
    while (i < end && (dict[i] == ' ' || dict[i] == ',')) ++i;
    if (i >= end) break;
    std::uint64_t d = 0;
    std::size_t digits = 0;
    while (i < end && dict[i] >= '0' && dict[i] <= '9') {
      d = d * 10 + static_cast<unsigned>(dict[i] - '0');
      if (d > kMaxSampleBytes) break;
      ++i, ++digits;
    }
    if (digits == 0 || (i < end && dict[i] != ',' && dict[i] != ' ')) {
      throw Error(ErrorCode::dataset, fmt::format(".npy shape is malformed: {}", text));
    }
    if (d == 0 || d > kMaxSampleBytes / bytes) {
      throw Error(ErrorCode::dataset,
                  fmt::format(".npy shape {} is empty or larger than a sample may be ({} bytes, kMaxSampleBytes)", text,
                              kMaxSampleBytes));
    }
    bytes *= d;
    shape.push_back(static_cast<std::int64_t>(d));
  }
  return bytes;
}

}  // namespace

NpyHeader parse_npy_header(std::span<const std::byte> value) {
  NpyHeader h;
  const std::string_view dict = dict_of(value, h.header_bytes);
  h.dtype = descr_in(dict);
  const auto fortran_at = value_of(dict, "fortran_order");
  if (fortran_at == std::string_view::npos) {
    throw Error(ErrorCode::dataset, fmt::format(".npy header has no 'fortran_order': {}", dict));
  }
  if (dict.substr(fortran_at, 4) == "True") {
    throw Error(ErrorCode::dataset, ".npy array is in Fortran order; stoker delivers C order");
  }
  h.data_bytes = shape_in(dict, dtype_size(h.dtype), h.shape);
  return h;
}

std::string npy_header(DType dtype, std::span<const std::int64_t> shape) {
  std::string dims;
  for (auto d : shape) dims += std::to_string(d) + ",";
  if (shape.size() > 1) dims.pop_back();
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr_of(dtype), dims);
  while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  std::string out(kMagic, sizeof kMagic);
  out += '\x01';
  out += '\x00';
  const auto len = static_cast<std::uint16_t>(dict.size());
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>(len >> 8);
  return out + dict;
}

void write_npy(const std::string& path, DType dtype, std::span<const std::int64_t> shape, const void* data,
               std::size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  const std::string header = npy_header(dtype, shape);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) throw Error::from_errno(errno, path + ": writing");
}

}  // namespace stoker::formats
