// The built-in image operations (docs/pipeline.md): decode, decode_jpeg, decode_png,
// random_resized_crop, resize, center_crop, flip, to_chw here, color_jitter and normalize in their
// own files; the list of them all; and the pairs of them that run fused, in one pass.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "loader/pipeline/ops/op.h"

namespace stoker::detail {

// A built-in operation: its name and how to make it from its text (arguments checked).
struct BuiltinOp {
  std::string_view name;
  std::unique_ptr<Op> (*make)(const OpText& text);
};

// Every built-in operation, in documentation order: the one list of them.
const std::vector<BuiltinOp>& builtin_ops();

// `first` and `second` (bound, adjacent; `second_out` is what second was bound to make) as one
// operation that does both in one pass, when they are a pair that can: decode followed by a crop
// (decode only the region), resize followed by center_crop (resize only the crop), flip followed by
// to_chw (one copy). Otherwise nullptr, and both are
// left as they are.
std::unique_ptr<Op> fuse(std::unique_ptr<Op>& first, std::unique_ptr<Op>& second, const Spec& second_out);

}  // namespace stoker::detail
