// The normalize operation (docs/pipeline.md): torchvision's ToTensor then Normalize, per channel.
#pragma once

#include <memory>

#include "loader/pipeline/ops/op.h"

namespace stoker::detail {

// normalize(mean, std) or normalize(m0, m1, m2, s0, s1, s2), its arguments checked.
std::unique_ptr<Op> make_normalize(const OpText& text);

}  // namespace stoker::detail
