// The operations a pipeline may name: the built-in ones (loader/pipeline/ops/image_ops.h) and those a user
// registered (stoker/pipeline.h's register_op), by name. Registration is not synchronised: users
// register before any Loader exists, as stoker/pipeline.h says.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loader/pipeline/ops/op.h"

namespace stoker::detail {

// The operation `text` names, its arguments checked. Throws stoker::Error for an unknown name
// (listing the operations there are) or bad arguments.
std::unique_ptr<Op> make_op(const OpText& text);

// The operations users registered.
std::size_t user_op_count() noexcept;
// While `sink` is set, register_op() appends what it would throw to `sink` instead: a library's
// static initialisers (loader/pipeline/ops/op_library.h) must not throw. nullptr: throw again.
void collect_registration_errors(std::vector<std::string>* sink) noexcept;

}  // namespace stoker::detail
