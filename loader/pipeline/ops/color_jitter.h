// The color_jitter operation (docs/pipeline.md): torchvision's ColorJitter on u8 images, its
// parameters drawn per sample, the adjustments those of loader/pipeline/ops/color_adjust.h.
#pragma once

#include <memory>

#include "loader/pipeline/ops/op.h"

namespace stoker::detail {

// color_jitter(b, c, s) or color_jitter(b, c, s, h), its arguments checked.
std::unique_ptr<Op> make_color_jitter(const OpText& text);

}  // namespace stoker::detail
