#include "loader/ring_sizing.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/posix_error.h"

namespace stoker::detail {
namespace {

// A container size to suggest: bytes rounded up to whole GiB, or to 64 MiB below 1 GiB.
std::string docker_size(std::uint64_t bytes) {
  constexpr std::uint64_t kMiB = 1 << 20, kGiB = 1 << 30;
  if (bytes >= kGiB) return fmt::format("{}g", (bytes + kGiB - 1) / kGiB);
  return fmt::format("{}m", (bytes + 64 * kMiB - 1) / (64 * kMiB) * 64);
}

}  // namespace

std::optional<std::uint32_t> depth_within(const SegmentLayout& layout, const RingRequest& request,
                                          std::uint64_t budget_bytes) noexcept {
  std::uint32_t depth = request.wanted();
  while (depth >= request.least() && layout.segment_bytes(depth) > budget_bytes) --depth;
  if (depth < request.least()) return std::nullopt;
  return depth;
}

Error ring_refusal(const SegmentLayout& layout, const RingRequest& request, const std::string& why) {
  const std::uint32_t least = request.least();
  const auto container = static_cast<std::uint64_t>(static_cast<double>(layout.segment_bytes(request.wanted())) /
                                                    request.shm_fraction);
  return Error(fmt::format(
      "stoker: not enough shared memory for {} workers: needs {} ({} batch slots of {} plus {} of control), {}. "
      "Start the container with --shm-size={} or more, use fewer workers, or smaller batches",
      request.num_workers, format_bytes(layout.segment_bytes(least)), least, format_bytes(layout.slot_bytes()),
      format_bytes(layout.control_bytes(least)), why, docker_size(container)));
}

ReservedRing reserve_ring(const SegmentLayout& layout, const RingRequest& request, const ShmBudget& budget,
                          ShmBacking backing) {
  const std::optional<std::uint32_t> in_shm = depth_within(layout, request, budget.bytes);
  const std::optional<std::uint32_t> in_memory = depth_within(layout, request, budget.memory_bytes);
  ShmBacking used = ShmBacking::dev_shm;
  std::vector<std::string> warnings;
  std::optional<std::uint32_t> fits;
  switch (backing) {
    case ShmBacking::dev_shm:
      fits = in_shm;
      if (!fits) {
        throw ring_refusal(layout, request,
                           fmt::format("but the budget is {} ({})", format_bytes(budget.bytes), budget.reason));
      }
      break;
    case ShmBacking::memfd:
      used = ShmBacking::memfd;
      fits = in_memory;
      if (!fits) {
        throw ring_refusal(layout, request, fmt::format("but the memory budget is {} ({})",
                                                        format_bytes(budget.memory_bytes), budget.memory_reason));
      }
      break;
    case ShmBacking::automatic:
      if (in_shm && *in_shm == request.wanted()) {
        fits = in_shm;
      } else if (in_memory && (!in_shm || *in_memory > *in_shm)) {
        fits = in_memory;
        used = ShmBacking::memfd;
        warnings.push_back(fmt::format(
            "/dev/shm cannot hold the ring ({} wanted, the budget there is {}: {}); using {} of memfd memory instead, "
            "which /dev/shm's size does not limit",
            format_bytes(layout.segment_bytes(request.wanted())), format_bytes(budget.bytes), budget.reason,
            format_bytes(layout.segment_bytes(*in_memory))));
      } else {
        fits = in_shm;
      }
      if (!fits) {
        throw ring_refusal(layout, request,
                           fmt::format("but the budget is {} in /dev/shm ({}) and {} of memory ({})",
                                       format_bytes(budget.bytes), budget.reason, format_bytes(budget.memory_bytes),
                                       budget.memory_reason));
      }
      break;
  }
  const bool memfd = used == ShmBacking::memfd;
  std::uint32_t depth = *fits;
  std::optional<ShmSegment> segment;
  for (;;) {
    segment = memfd ? ShmSegment::try_create_memfd(layout.segment_bytes(depth))
                    : ShmSegment::try_create_shared(layout.segment_bytes(depth));
    if (segment) break;
    if (depth == request.least()) {
      throw ring_refusal(layout, request,
                         memfd ? fmt::format("but reserving it failed with ENOSPC/ENOMEM ({} of memory available)",
                                             format_bytes(budget.memory_available))
                               : fmt::format("but reserving it failed with ENOSPC ({} free in /dev/shm)",
                                             format_bytes(budget.shm_free)));
    }
    depth = std::max(request.least(), depth * 3 / 4);
  }
  if (depth < request.wanted()) {
    warnings.push_back(fmt::format(
        "ring lowered from {} to {} batches ({} workers x prefetch {} needs {}; the budget is {}: {}); workers may "
        "wait for the training loop. More shared memory (--shm-size) restores it",
        request.wanted(), depth, request.num_workers, request.prefetch, format_bytes(layout.segment_bytes(request.wanted())),
        format_bytes(memfd ? budget.memory_bytes : budget.bytes), memfd ? budget.memory_reason : budget.reason));
  }
  return ReservedRing{std::move(*segment), depth, used, std::move(warnings)};
}

}  // namespace stoker::detail
