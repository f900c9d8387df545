// What the consumer checks in a slot a worker says it filled, before anything in it is used: a
// worker is another process, and one corrupted by a decoder bug (or anything else) must not make
// the training process read out of bounds. The header and indices must still be the task the
// consumer wrote, the status one stoker writes, the error text within its region, the skipped
// samples' positions within the batch and ascending, and each bytes field's offsets start at 0,
// never decrease and end within the field's region. A slot that fails
// is treated as its worker's death (loader/producers/worker_source.h): the worker is killed and its
// batches are loaded again by a replacement.
#pragma once

#include <cstdint>
#include <string>

#include "loader/plan/epoch_plan.h"
#include "loader/shm/segment_layout.h"

namespace stoker::detail {

// "" when slot s holds a well-formed answer to the task "batch b of `plan`" whose indices have
// `digest` (write_task's), else what is wrong.
std::string check_filled_slot(const SegmentView& view, const Schema& schema, std::uint32_t s, const EpochPlan& plan,
                              std::uint64_t b, std::uint64_t digest);

}  // namespace stoker::detail
