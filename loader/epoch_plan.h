// EpochPlan: one epoch's batches, the sampler's order cut into batches of batch_size, and how a
// batch is written into a slot as a task (header and sample indices) for whoever fills it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "loader/segment_layout.h"

namespace stoker::detail {

struct EpochPlan {
  std::uint64_t epoch = 0;
  std::vector<std::uint64_t> order;  // this rank's samples of the epoch, in delivery order
  std::size_t batch_size = 1;
  std::uint64_t num_batches = 0;

  std::span<const std::uint64_t> batch(std::uint64_t b) const noexcept {
    const std::uint64_t first = b * batch_size;
    const std::uint64_t n = std::min<std::uint64_t>(batch_size, order.size() - first);
    return {order.data() + first, n};
  }

  // Makes slot s the task "load batch b": its header and sample indices.
  void write_task(const SegmentView& view, std::uint32_t s, std::uint64_t b) const noexcept {
    SlotHeader& h = view.slot_header(s);
    const auto samples = batch(b);
    h.task_id = b;
    h.epoch = epoch;
    h.batch_index = b;
    h.num_samples = static_cast<std::uint32_t>(samples.size());
    h.status = static_cast<std::uint32_t>(SlotStatus::empty);
    h.error_bytes = 0;
    h.busy_ns = 0;
    std::copy(samples.begin(), samples.end(), view.slot_indices(s));
  }
};

}  // namespace stoker::detail
