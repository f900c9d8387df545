// Whether a saved state (stoker/state.h) resumes this loader: the same dataset (samples, fields,
// shards), the same order and seed, and an epoch not yet finished.
#pragma once

#include "stoker/state.h"

namespace stoker::detail {

// Throws stoker::Error (ErrorCode::state_mismatch) naming every difference between `state` and
// `here` (this loader's state now) that would resume another order, or saying that the state's
// epoch is finished.
void check_resumable(const LoaderState& state, const LoaderState& here);

}  // namespace stoker::detail
