// Integers from JSON, checked: nlohmann's get<T>() converts a float, or a number out of T's range,
// with a plain cast (undefined behaviour for a float out of range). Everything stoker reads from
// a file goes through here.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

namespace stoker::detail {

// `v` as a T when it is an integer within T's range; nullopt otherwise (a float, a string, ...).
template <class T>
std::optional<T> json_integer(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::nullopt;
    return static_cast<T>(u);
  }
  if (v.is_number_integer()) {
    const std::int64_t i = v.get<std::int64_t>();
    if constexpr (std::is_unsigned_v<T>) {
      if (i < 0) return std::nullopt;
      if (static_cast<std::uint64_t>(i) > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
        return std::nullopt;
      }
    } else {
      if (i < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
          i > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
        return std::nullopt;
      }
    }
    return static_cast<T>(i);
  }
  return std::nullopt;
}

}  // namespace stoker::detail
