#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "stoker/error.h"
#include "stoker/device.h"
#include "stoker/options.h"

namespace stoker {
namespace {

std::optional<std::uint32_t> env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  std::string_view s(v);
  std::uint32_t n = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || p != s.data() + s.size()) {
    throw Error(fmt::format("Shard::from_env: {}='{}' is not a non-negative integer", name, s));
  }
  return n;
}

}  // namespace

Shard Shard::from_env() {
  for (auto [rank_var, size_var] : {std::pair{"RANK", "WORLD_SIZE"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}}) {
    auto rank = env_number(rank_var);
    auto size = env_number(size_var);
    if (rank && size) {
      if (*size == 0 || *rank >= *size) {
        throw Error(fmt::format("Shard::from_env: {}={} is not below {}={}", rank_var, *rank, size_var, *size));
      }
      return Shard{*rank, *size};
    }
    if (rank || size) {
      throw Error(fmt::format("Shard::from_env: {} is set but {} is not", rank ? rank_var : size_var,
                              rank ? size_var : rank_var));
    }
  }
  throw Error("Shard::from_env: neither RANK/WORLD_SIZE (torchrun) nor OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE "
              "(Open MPI) is set; set Options::shard explicitly for a single process");
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "emulated") return emulated();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    std::string_view n = text.substr(5);
    int index = 0;
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec == std::errc() && p == n.data() + n.size() && index >= 0) return cuda(index);
  }
  throw Error(fmt::format("device '{}': expected cpu, cuda, cuda:N or emulated", text));
}

std::string Device::str() const {
  switch (kind) {
    case Kind::cpu: return "cpu";
    case Kind::cuda: return fmt::format("cuda:{}", index);
    case Kind::emulated: return "emulated";
  }
  return "?";
}

}  // namespace stoker
