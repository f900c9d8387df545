// A task in a slot: "load batch b of the plan", written as the slot's header and sample indices
// (docs/shm-layout.md) for whoever fills the slot, a worker or the inline source.
#pragma once

#include <cstdint>

#include "loader/plan/epoch_plan.h"
#include "loader/shm/segment_layout.h"

namespace stoker::detail {

// Makes slot s the task "load batch b of `plan`": its header (status empty) and sample indices.
inline void write_task(const SegmentView& view, std::uint32_t s, const EpochPlan& plan, std::uint64_t b) noexcept {
  SlotHeader& h = view.slot_header(s);
  h.task_id = b;
  h.epoch = plan.epoch;
  h.batch_index = b;
  h.num_samples = static_cast<std::uint32_t>(plan.batch_length(b));
  h.status = static_cast<std::uint32_t>(SlotStatus::empty);
  h.error_bytes = 0;
  h.busy_ns = 0;
  plan.batch(b, view.slot_indices(s));  // computed here, from the order's definition: no table
}

}  // namespace stoker::detail
