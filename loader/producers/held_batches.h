// The error for a loader whose every slot is held by live stoker::Batch objects: no batch can be
// loaded until the user lets one go, so it is raised instead of waiting forever.
#pragma once

#include <cstdint>

#include "loader/shm/slot_pool.h"
#include "stoker/error.h"

namespace stoker::detail {

Error held_batches_error(const SlotPool& slots, std::uint64_t epoch);

}  // namespace stoker::detail
