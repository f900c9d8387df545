// SlotPool: the segment's slots and who has them.
//
// A slot is free (in free_), in flight (taken by the consumer for a task), or held (by a live
// Batch). The pool owns the mapping and is shared by the loader and every Batch, so a Batch may
// outlive its Loader. Thread-safety: acquire() and make_batch() are the consumer's; release() may
// come from any thread (a Batch destroyed in autograd, say); mu_ guards free_ and held_.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "loader/batch/batch_owner.h"
#include "loader/shm/segment_layout.h"
#include "loader/shm/shm_segment.h"
#include "stoker/batch.h"

namespace stoker::detail {

// The bytes fields of a batch that did not fit its slot, read into memory of this process instead
// (docs/shm-layout.md). The pool keeps `owner` alive with the batch and knows nothing else of it.
struct OutsideBytes {
  struct Field {
    const std::byte* data = nullptr;
    std::span<const std::uint64_t> offsets;  // B+1
  };
  std::shared_ptr<const void> owner;
  std::vector<Field> fields;  // per field of the schema; only bytes fields' are used
};

class SlotPool final : public BatchOwner, public std::enable_shared_from_this<SlotPool> {
 public:
  SlotPool(ShmSegment segment, SegmentLayout layout, std::uint32_t num_slots);

  const SegmentView& view() const noexcept { return view_; }
  const ShmSegment& segment() const noexcept { return segment_; }
  const SegmentLayout& layout() const noexcept { return layout_; }
  std::uint32_t num_slots() const noexcept { return num_slots_; }

  std::optional<std::uint32_t> acquire();
  // Slots in flight or held by batches.
  std::uint32_t in_use() const;
  void release(std::uint32_t slot) noexcept override;

  // Hands slot s, filled, to the user. `outside`: the bytes fields of a batch too large for the
  // slot, read by the consumer (one per field; kept until the slot is released). The batch's
  // skipped positions are a copy of the slot's (SegmentView::copy_skipped), kept by the pool.
  Batch make_batch(std::uint32_t s, OutsideBytes outside = {});

  // Batch indices (within their epochs) of the slots held by live batches, ascending.
  std::vector<std::uint64_t> held_batches() const;

 private:
  ShmSegment segment_;
  SegmentLayout layout_;
  SegmentView view_;
  std::uint32_t num_slots_;
  mutable std::mutex mu_;
  std::vector<std::uint32_t> free_;  // guarded by mu_
  std::vector<bool> held_;           // guarded by mu_
  std::vector<bool> free_flag_;      // guarded by mu_: slot s is in free_ (catches a double release)
  std::vector<std::shared_ptr<const void>> keep_alive_;  // guarded by mu_: per slot, its OutsideBytes' owner
  // Per slot, the positions of its skipped samples, copied out of the slot when its batch is made
  // (Batch::skipped() points here, not into memory a worker maps). The consumer's: written by
  // make_batch() only, while the slot is not held.
  std::vector<std::vector<std::uint32_t>> skipped_;
};

}  // namespace stoker::detail
