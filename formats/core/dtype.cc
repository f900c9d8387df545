#include "stoker/dtype.h"

#include <array>

namespace stoker {
namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DTypeInfo, 13> kDTypes = {{
    {DType::u8, "u8", 1},
    {DType::i8, "i8", 1},
    {DType::u16, "u16", 2},
    {DType::i16, "i16", 2},
    {DType::i32, "i32", 4},
    {DType::i64, "i64", 8},
    {DType::f16, "f16", 2},
    {DType::f32, "f32", 4},
    {DType::f64, "f64", 8},
    {DType::b8, "bool", 1},
    {DType::u32, "u32", 4},
    {DType::u64, "u64", 8},
    {DType::bf16, "bf16", 2},
}};

}  // namespace

std::size_t dtype_size(DType t) noexcept { return kDTypes[static_cast<std::size_t>(t)].size; }

std::string_view dtype_name(DType t) noexcept { return kDTypes[static_cast<std::size_t>(t)].name; }

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (const auto& info : kDTypes) {
    if (info.name == name) return info.type;
  }
  return std::nullopt;
}

}  // namespace stoker
