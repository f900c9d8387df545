// The built-in image operations (docs/pipeline.md): decode, decode_jpeg, decode_png,
// random_resized_crop, resize, center_crop, flip, to_chw here, color_jitter and normalize in their
// own files; the list of them all; and the pairs of them that run fused, in one pass.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "formats/image/image_decode.h"
#include "loader/pipeline/ops/op.h"

namespace stoker::detail {

// A built-in operation: its name and how to make it from its text (arguments checked).
struct BuiltinOp {
  std::string_view name;
  std::unique_ptr<Op> (*make)(const OpText& text);
};

// The region of an h x w image random_resized_crop takes: torchvision's RandomResizedCrop.get_params with
// scale (0.08, 1) and ratio (3/4, 4/3), from `random`'s next draws. (The image ceiling benchmark takes the same
// regions through it.)
formats::Region random_resized_crop_region(int h, int w, SampleRandom& random);

// Every built-in operation, in documentation order: the one list of them.
const std::vector<BuiltinOp>& builtin_ops();

// `first` and `second` (bound, adjacent; `second_out` is what second was bound to make) as one
// operation that does both in one pass, when they are a pair that can: decode followed by a crop
// (decode only the region), resize followed by center_crop (resize only the crop), flip followed by
// to_chw (one copy), and the first of those followed by the last when the crop is
// random_resized_crop (decode, crop, resize, mirror and planes in one pass). Otherwise nullptr, and
// both are left as they are. A fused operation may be fused again: the caller tries until no pair
// fuses.
std::unique_ptr<Op> fuse(std::unique_ptr<Op>& first, std::unique_ptr<Op>& second, const Spec& second_out);

}  // namespace stoker::detail
