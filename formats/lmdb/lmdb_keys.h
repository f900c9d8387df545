// The keys of an LMDB database without a stoker schema (docs/lmdb-layout.md): sample indices
// spelled as decimal, zero-padded decimal or 8-byte big-endian integers.
#pragma once

#include <lmdb.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace stoker::formats {

enum class KeyStyle { decimal, zero_padded, big_endian };

// b'17' / b'\x00\x11' for errors: printable bytes as they are, the rest as \xNN; at most 40 bytes.
std::string show_key(const void* data, std::size_t size);

struct PlainKeys {
  KeyStyle style = KeyStyle::decimal;
  std::size_t width = 0;  // zero_padded

  // The style the first key of a database (index 0) is written in; nullopt when it is not index 0
  // in any of them.
  static std::optional<PlainKeys> from_first_key(const MDB_val& first);
  // The key of sample i, in buf (at least 24 bytes).
  MDB_val key(std::uint64_t i, char* buf) const;
  // The index a key spells in this style, or nullopt.
  std::optional<std::uint64_t> parse(const MDB_val& k) const;
  // "decimal (b'0', b'1', ...)"
  std::string describe() const;
};

}  // namespace stoker::formats
