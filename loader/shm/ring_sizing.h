// How deep the shared-memory ring is, and the segment that holds it.
//
// The wanted depth is num_workers * prefetch slots, and the slots the training loop keeps batches
// in (Options::held_batches); the least is one slot per worker and the kept ones. The segment
// lives in /dev/shm when that holds the wanted depth, else (ShmBacking::automatic) in memfd memory,
// which /dev/shm's size does not limit, when that holds more; either can be forced. The depth is
// the largest that fits the chosen backing's budget (loader/shm/shm_budget.h) and that the kernel
// actually reserves (posix_fallocate can still fail with ENOSPC when memory filled up meanwhile:
// the depth is then lowered by a quarter and tried again). Below the least the loader is refused
// with the bytes it needs and the fix; moving to memfd and a lowered depth cost one warning each.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "loader/shm/segment_layout.h"
#include "loader/shm/shm_budget.h"
#include "loader/shm/shm_segment.h"
#include "stoker/error.h"
#include "stoker/options.h"

namespace stoker::detail {

struct RingRequest {
  std::uint32_t num_workers = 1;
  std::uint32_t prefetch = 1;
  std::uint32_t held = 0;     // slots the training loop keeps batches in
  double shm_fraction = 0.5;  // only to suggest a container size

  std::uint32_t wanted() const noexcept { return num_workers * prefetch + held; }
  std::uint32_t least() const noexcept { return num_workers + held; }
};

// The deepest ring in [least, wanted] whose segment fits `budget_bytes`; nullopt if none does.
std::optional<std::uint32_t> depth_within(const SegmentLayout& layout, const RingRequest& request,
                                          std::uint64_t budget_bytes) noexcept;

// The refusal: what is needed, `why` it is not there, and what to do: raise the `bounds` that held
// it back (a container's --shm-size, its memory limit, the budget option, free memory), or ask for less.
Error ring_refusal(const SegmentLayout& layout, const RingRequest& request, const std::string& why,
                   std::initializer_list<BudgetBound> bounds);

struct ReservedRing {
  ShmSegment segment;
  std::uint32_t depth = 0;
  ShmBacking backing = ShmBacking::dev_shm;  // the one used
  std::vector<std::string> warnings;         // the move to memfd, a lowered depth
};

// Reserves the segment for the deepest ring that fits, or throws ring_refusal().
ReservedRing reserve_ring(const SegmentLayout& layout, const RingRequest& request, const ShmBudget& budget,
                          ShmBacking backing = ShmBacking::automatic);

}  // namespace stoker::detail
