#include "formats/lmdb/lmdb_keys.h"

#include <fmt/format.h>

#include <algorithm>

#include "formats/lmdb/lmdb_env.h"

namespace stoker::formats {

// Zero-padded keys of more digits than this are not indices (and would not fit key()'s buffer).
constexpr std::size_t kMaxDigits = 19;

std::string show_key(const void* data, std::size_t size) {
  std::string out = "b'";
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < std::min<std::size_t>(size, 40); ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\'' && p[i] != '\\') {
      out += static_cast<char>(p[i]);
    } else {
      out += fmt::format("\\x{:02x}", p[i]);
    }
  }
  return out + (size > 40 ? "...'" : "'");
}

std::optional<PlainKeys> PlainKeys::from_first_key(const MDB_val& first) {
  const auto* p = static_cast<const unsigned char*>(first.mv_data);
  PlainKeys keys;
  if (first.mv_size == 8 && std::all_of(p, p + 8, [](unsigned char c) { return c == 0; })) {
    keys.style = KeyStyle::big_endian;
    return keys;
  }
  if (first.mv_size >= 1 && first.mv_size <= kMaxDigits &&
      std::all_of(p, p + first.mv_size, [](unsigned char c) { return c == '0'; })) {
    keys.style = first.mv_size == 1 ? KeyStyle::decimal : KeyStyle::zero_padded;
    keys.width = first.mv_size;
    return keys;
  }
  return std::nullopt;
}

MDB_val PlainKeys::key(std::uint64_t i, char* buf) const {
  if (style == KeyStyle::big_endian) {
    encode_key(i, reinterpret_cast<unsigned char*>(buf));
    return {8, buf};
  }
  // At most 20 digits (decimal) or kMaxDigits (padded, of an index below 10^19): within 24.
  char* end = style == KeyStyle::decimal ? fmt::format_to(buf, "{}", i) : fmt::format_to(buf, "{:0{}}", i, width);
  return {static_cast<std::size_t>(end - buf), buf};
}

std::optional<std::uint64_t> PlainKeys::parse(const MDB_val& k) const {
  const auto* p = static_cast<const unsigned char*>(k.mv_data);
  if (style == KeyStyle::big_endian) {
    if (k.mv_size != 8) return std::nullopt;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
    return v;
  }
  if (k.mv_size == 0 || k.mv_size > kMaxDigits) return std::nullopt;
  if (style == KeyStyle::zero_padded && k.mv_size != width) return std::nullopt;
  if (style == KeyStyle::decimal && k.mv_size > 1 && p[0] == '0') return std::nullopt;
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < k.mv_size; ++i) {
    if (p[i] < '0' || p[i] > '9') return std::nullopt;
    v = v * 10 + (p[i] - '0');
  }
  return v;
}

std::string PlainKeys::describe() const {
  switch (style) {
    case KeyStyle::decimal: return "decimal (b'0', b'1', ...)";
    case KeyStyle::zero_padded:
      return fmt::format("zero-padded decimal of {} digits (b'{:0{}}', ...)", width, 0, width);
    case KeyStyle::big_endian: break;
  }
  return "8-byte big-endian integers";
}

}  // namespace stoker::formats
