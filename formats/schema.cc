#include "stoker/schema.h"

#include <fmt/format.h>

namespace stoker {

std::size_t Field::elements_per_sample() const noexcept {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

std::size_t Field::bytes_per_sample() const noexcept { return elements_per_sample() * dtype_size(dtype); }

std::string Field::describe() const {
  return fmt::format("{}: {}[{}]", name, dtype_name(dtype), fmt::join(shape, ","));
}

std::size_t Schema::bytes_per_sample() const noexcept {
  std::size_t n = 0;
  for (const auto& f : fields) n += f.bytes_per_sample();
  return n;
}

const Field* Schema::find(std::string_view name) const noexcept {
  for (const auto& f : fields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace stoker
