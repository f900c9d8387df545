// InlineSource: a loader with num_workers = 0 fills each slot itself, in the calling thread, with
// the BatchFiller the workers use, so both paths deliver the same bytes and the same errors.
#pragma once

#include <memory>

#include "loader/producers/slot_source.h"
#include "loader/shm/slot_pool.h"
#include "loader/worker/batch_filler.h"

namespace stoker::detail {

class InlineSource final : public SlotSource {
 public:
  InlineSource(std::shared_ptr<SlotPool> slots, BatchFiller filler)
      : slots_(std::move(slots)), filler_(std::move(filler)) {}

  void start(const EpochPlan& plan, std::uint64_t first) override {
    plan_ = &plan;
    next_ = first;
  }
  std::uint32_t next_filled() override;
  bool wait_filled(std::chrono::steady_clock::time_point until) override {
    return !gate_ || gate_->wait_ready(next_, until);
  }
  void interrupt() noexcept override {
    if (gate_) gate_->interrupt();
  }

 private:
  std::shared_ptr<SlotPool> slots_;
  BatchFiller filler_;
  const EpochPlan* plan_ = nullptr;
  std::uint64_t next_ = 0;
};

}  // namespace stoker::detail
