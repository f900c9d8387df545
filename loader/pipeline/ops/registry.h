// The operations a pipeline may name: the built-in ones (loader/pipeline/ops/image_ops.h) and those a user
// registered (stoker/pipeline.h's register_op), by name. Registration is not synchronised: users
// register before any Loader exists, as stoker/pipeline.h says.
#pragma once

#include <memory>
#include <string>

#include "loader/pipeline/ops/op.h"

namespace stoker::detail {

// The operation `text` names, its arguments checked. Throws stoker::Error for an unknown name
// (listing the operations there are) or bad arguments.
std::unique_ptr<Op> make_op(const OpText& text);

}  // namespace stoker::detail
