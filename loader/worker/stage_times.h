// The stages of a batch in a worker, as Stats::stages names them (docs/observability.md). A
// worker adds the time of each into its slot's stage times (SegmentView::slot_stage_ns), in this
// order: the consumer sums them per stage.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "loader/pipeline/pipeline.h"
#include "loader/shm/segment_layout.h"

namespace stoker::detail {

inline constexpr std::size_t kStageRead = 0;       // the reader: storage, page faults, HDF5's inflate
inline constexpr std::size_t kStageTransform = 1;  // Options::transform, its writes into the slot included
inline constexpr std::size_t kStageWrite = 2;      // copies of bytes fields into the slot
inline constexpr std::size_t kStageOps = 3;        // then each pipeline operation (stage_names())

// "read", "transform", "write", then the pipelines' stages; past kStageSlots, the last one is
// "other operations", which holds them all.
std::vector<std::string> worker_stage_names(const SamplePipelines& pipelines);

// A batch's stage times, in nanoseconds, in worker_stage_names() order.
class StageTimes {
 public:
  void reset() noexcept { ns_.fill(0); }
  void add(std::size_t stage, std::uint64_t ns) noexcept { ns_[stage < kStageSlots ? stage : kStageSlots - 1] += ns; }
  // The pipelines' operations, from their own counters.
  void add_operations(std::span<const std::uint64_t> ops) noexcept {
    for (std::size_t i = 0; i < ops.size(); ++i) add(kStageOps + i, ops[i]);
  }
  const std::array<std::uint64_t, kStageSlots>& ns() const noexcept { return ns_; }

 private:
  std::array<std::uint64_t, kStageSlots> ns_{};
};

}  // namespace stoker::detail
