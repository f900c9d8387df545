// A task in a slot: "load batch b of the plan", written as the slot's header and sample indices
// (docs/shm-layout.md) for whoever fills the slot, a worker or the inline source.
#pragma once

#include <xxhash.h>

#include <cstddef>
#include <cstdint>

#include "loader/plan/epoch_plan.h"
#include "loader/shm/segment_layout.h"

namespace stoker::detail {

// A digest of a task's sample indices, to check them in a filled slot against (slot_check.h).
inline std::uint64_t indices_digest(const std::uint64_t* indices, std::uint64_t n) noexcept {
  return XXH3_64bits(indices, static_cast<std::size_t>(n) * sizeof(std::uint64_t));
}

// Makes slot s the task "load batch b of `plan`": its header (status empty) and sample indices.
// Returns the indices' digest: the consumer keeps it (the slot is the workers' to write) rather
// than computing them again for the check.
inline std::uint64_t write_task(const SegmentView& view, std::uint32_t s, const EpochPlan& plan,
                                std::uint64_t b) noexcept {
  SlotHeader& h = view.slot_header(s);
  h.task_id = b;
  h.epoch = plan.epoch;
  h.batch_index = b;
  h.num_samples = static_cast<std::uint32_t>(plan.batch_length(b));
  h.status = static_cast<std::uint32_t>(SlotStatus::empty);
  h.error_bytes = 0;
  h.busy_ns = 0;
  h.shard_opens = 0;
  view.slot_skipped(s)[0] = 0;
  plan.batch(b, view.slot_indices(s));  // computed here, from the order's definition: no table
  return indices_digest(view.slot_indices(s), h.num_samples);
}

}  // namespace stoker::detail
