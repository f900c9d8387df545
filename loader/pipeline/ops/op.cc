#include "loader/pipeline/ops/op.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

namespace stoker::detail {

std::string describe(const Spec& s) {
  if (s.bytes) return "bytes";
  std::vector<std::string> dims;
  for (auto d : s.shape) dims.push_back(d < 0 ? "?" : std::to_string(d));
  return fmt::format("{}[{}]{}", dtype_name(s.dtype), fmt::join(dims, ","), s.chw ? " (CHW)" : "");
}

}  // namespace stoker::detail
