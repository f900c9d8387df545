// stoker/dtype.h: element types of sample fields.
//
// Values are little-endian and tightly packed wherever stoker stores or delivers them. The names
// ("u8", "f32", ...) are those used in schemas, on the command line and in docs/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "stoker/export.h"

namespace stoker {

// b8 is a bool stored in one byte, 0 or 1 ("bool"); bf16 is bfloat16 (8 exponent and 7 mantissa
// bits). New types are appended: the numbering is part of the ABI.
enum class DType : std::uint8_t { u8, i8, u16, i16, i32, i64, f16, f32, f64, b8, u32, u64, bf16 };

// Size of one element in bytes.
STOKER_API std::size_t dtype_size(DType t) noexcept;

// "u8", "i64", "f16", ...
STOKER_API std::string_view dtype_name(DType t) noexcept;

// Inverse of dtype_name(); nullopt for an unknown name.
STOKER_API std::optional<DType> parse_dtype(std::string_view name) noexcept;

}  // namespace stoker
