#include "stoker/options.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "base/option_spelling.h"
#include "loader/plan/launcher_env.h"
#include "stoker/device.h"
#include "stoker/error.h"

namespace stoker {

Shard Shard::from_env() {
  auto info = detail::launch_info_from_env([](const char* name) { return std::getenv(name); });
  if (!info) {
    throw Error(ErrorCode::invalid_option,
                "Shard::from_env: no launcher's variables are set (RANK/WORLD_SIZE from torchrun, "
                "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE from Open MPI, PMI_RANK/PMI_SIZE, or "
                "SLURM_PROCID/SLURM_NTASKS); set Options::shard (or shard=) explicitly for a single process");
  }
  return Shard{info->rank, info->world_size};
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
  throw Error(ErrorCode::invalid_option,
              fmt::format("device '{}': expected cpu, cuda, cuda:N or emulated", printable(text)));
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
