#include "loader/pipeline/ops/op.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "stoker/error.h"

namespace stoker::detail {

std::string describe(const Spec& s) {
  if (s.bytes) return s.dtype == DType::u8 ? "bytes" : fmt::format("variable-length {}", dtype_name(s.dtype));
  std::vector<std::string> dims;
  for (auto d : s.shape) dims.push_back(d < 0 ? "?" : std::to_string(d));
  return fmt::format("{}[{}]{}", dtype_name(s.dtype), fmt::join(dims, ","), s.chw ? " (CHW)" : "");
}

int positive_int(const OpText& op, std::size_t i, const char* what) {
  const double v = op.args[i];
  if (v != std::floor(v) || v < 1 || v > 65536) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("'{}': {} must be a whole number from 1 to 65536, not {}", op.text, what, v));
  }
  return static_cast<int>(v);
}

void expect_args(const OpText& op, std::initializer_list<std::size_t> counts, const char* usage) {
  if (std::find(counts.begin(), counts.end(), op.args.size()) == counts.end()) {
    throw Error(ErrorCode::invalid_option, fmt::format("'{}': takes {} (got {} argument{})", op.text, usage,
                                                       op.args.size(), op.args.size() == 1 ? "" : "s"));
  }
}

void expect_image(const Spec& in, const OpText& op, bool allow_chw) {
  if (in.bytes)
    throw Error(ErrorCode::invalid_option,
                fmt::format("'{}' needs an image, and its input is encoded bytes: decode first", op.text));
  if (in.shape.size() != 3) {
    throw Error(
        ErrorCode::invalid_option,
        fmt::format("'{}' needs an image (height, width, channels), and its input is {}", op.text, describe(in)));
  }
  if (in.chw && !allow_chw)
    throw Error(ErrorCode::invalid_option, fmt::format("'{}' works on HWC images: put it before to_chw", op.text));
  if (in.dtype != DType::u8 && in.dtype != DType::f32) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("'{}' works on u8 or f32 images, and its input is {}", op.text, describe(in)));
  }
}

}  // namespace stoker::detail
