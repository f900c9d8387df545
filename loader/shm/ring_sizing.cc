#include "loader/shm/ring_sizing.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "base/option_spelling.h"
#include "base/posix_error.h"

namespace stoker::detail {
namespace {

// A container size to suggest: bytes rounded up to whole GiB, or to 64 MiB below 1 GiB.
std::string docker_size(std::uint64_t bytes) {
  constexpr std::uint64_t kMiB = 1 << 20, kGiB = 1 << 30;
  if (bytes >= kGiB) return fmt::format("{}g", (bytes + kGiB - 1) / kGiB);
  return fmt::format("{}m", (bytes + 64 * kMiB - 1) / (64 * kMiB) * 64);
}

// What raises `bound` so that `needed` bytes fit (`container`: the --shm-size to suggest); "" when
// nothing is known.
std::string raise_advice(BudgetBound bound, std::uint64_t needed, std::uint64_t container) {
  switch (bound) {
    case BudgetBound::shm_space:
      return fmt::format("start the container with --shm-size={} or more", docker_size(container));
    case BudgetBound::cgroup: return "raise the container's memory limit (docker run --memory)";
    case BudgetBound::option:
      return fmt::format("raise the shm budget option ({}) to {} or more", option_name("shm_budget"),
                         format_bytes(needed));
    case BudgetBound::available_memory: return "free memory on this machine";
    case BudgetBound::unknown: break;
  }
  return "";
}

// The container whose /dev/shm holds the whole ring within the default fraction.
std::uint64_t container_for(const SegmentLayout& layout, const RingRequest& request) {
  return static_cast<std::uint64_t>(static_cast<double>(layout.segment_bytes(request.wanted())) / request.shm_fraction);
}

}  // namespace

std::optional<std::uint32_t> depth_within(const SegmentLayout& layout, const RingRequest& request,
                                          std::uint64_t budget_bytes) noexcept {
  std::uint32_t depth = request.wanted();
  while (depth >= request.least() && layout.segment_bytes(depth) > budget_bytes) --depth;
  if (depth < request.least()) return std::nullopt;
  return depth;
}

Error ring_refusal(const SegmentLayout& layout, const RingRequest& request, const std::string& why,
                   std::initializer_list<BudgetBound> bounds) {
  const std::uint32_t least = request.least();
  const std::uint64_t needed = layout.segment_bytes(least);
  std::vector<std::string> fixes;
  for (BudgetBound b : bounds) {
    std::string fix = raise_advice(b, needed, container_for(layout, request));
    if (!fix.empty() && std::find(fixes.begin(), fixes.end(), fix) == fixes.end()) fixes.push_back(std::move(fix));
  }
  fixes.push_back(request.held ? fmt::format("use fewer workers, fewer held batches ({}), or smaller batches",
                                             option_name("held_batches"))
                               : std::string("use fewer workers, or smaller batches"));
  std::string advice = fmt::format("{}", fmt::join(fixes, "; or "));
  advice[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(advice[0])));
  return Error(
      ErrorCode::shm,
      fmt::format("stoker: not enough shared memory for {} workers{}: needs {} ({} batch slots of {} plus {} of "
                  "control), {}. {}",
                  request.num_workers,
                  request.held ? fmt::format(" and {} held batch{} ({})", request.held, request.held == 1 ? "" : "es",
                                             option_name("held_batches"))
                               : std::string(),
                  format_bytes(needed), least, format_bytes(layout.slot_bytes()),
                  format_bytes(layout.control_bytes(least)), why, advice));
}

namespace {

// Where the ring goes and how deep it may be there, before anything is reserved; throws the
// refusal when nothing fits. Moving to memfd is said in `warnings`.
struct Placement {
  ShmBacking backing = ShmBacking::dev_shm;
  std::uint32_t depth = 0;
};
Placement place_ring(const SegmentLayout& layout, const RingRequest& request, const ShmBudget& budget,
                     ShmBacking backing, std::vector<std::string>& warnings) {
  const std::optional<std::uint32_t> in_shm = depth_within(layout, request, budget.bytes);
  const std::optional<std::uint32_t> in_memory = depth_within(layout, request, budget.memory_bytes);
  switch (backing) {
    case ShmBacking::dev_shm:
      if (!in_shm) {
        // Memory outside /dev/shm would hold it: not forcing the backing is a fix too.
        const std::string memfd_would =
            in_memory ? fmt::format("; memfd memory would hold it ({})",
                                    option_setting("shm_backing", "ShmBacking::automatic", "auto"))
                      : "";
        throw ring_refusal(
            layout, request,
            fmt::format("but the budget is {} ({}){}", format_bytes(budget.bytes), budget.reason, memfd_would),
            {budget.bound});
      }
      return {ShmBacking::dev_shm, *in_shm};
    case ShmBacking::memfd:
      if (!in_memory) {
        throw ring_refusal(
            layout, request,
            fmt::format("but the memory budget is {} ({})", format_bytes(budget.memory_bytes), budget.memory_reason),
            {budget.memory_bound});
      }
      return {ShmBacking::memfd, *in_memory};
    case ShmBacking::automatic: break;
  }
  if (in_shm && *in_shm == request.wanted()) return {ShmBacking::dev_shm, *in_shm};
  if (in_memory && (!in_shm || *in_memory > *in_shm)) {
    warnings.push_back(fmt::format(
        "/dev/shm cannot hold the ring ({} wanted, the budget there is {}: {}); using {} of memfd memory instead, "
        "which /dev/shm's size does not limit",
        format_bytes(layout.segment_bytes(request.wanted())), format_bytes(budget.bytes), budget.reason,
        format_bytes(layout.segment_bytes(*in_memory))));
    return {ShmBacking::memfd, *in_memory};
  }
  if (in_shm) return {ShmBacking::dev_shm, *in_shm};
  throw ring_refusal(
      layout, request,
      fmt::format("but the budget is {} in /dev/shm ({}) and {} of memory ({})", format_bytes(budget.bytes),
                  budget.reason, format_bytes(budget.memory_bytes), budget.memory_reason),
      {budget.bound, budget.memory_bound});
}

}  // namespace

ReservedRing reserve_ring(const SegmentLayout& layout, const RingRequest& request, const ShmBudget& budget,
                          ShmBacking backing) {
  std::vector<std::string> warnings;
  const Placement place = place_ring(layout, request, budget, backing, warnings);
  const bool memfd = place.backing == ShmBacking::memfd;
  std::uint32_t depth = place.depth;
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
                                             format_bytes(budget.shm_free)),
                         {memfd ? BudgetBound::available_memory : BudgetBound::shm_space});
    }
    depth = std::max(request.least(), depth * 3 / 4);
  }
  if (depth < request.wanted()) {
    const std::string fix = raise_advice(memfd ? budget.memory_bound : budget.bound,
                                         layout.segment_bytes(request.wanted()), container_for(layout, request));
    warnings.push_back(fmt::format(
        "ring lowered from {} to {} batches ({} workers x prefetch {}{} needs {}; the budget is {}: {}); workers may "
        "wait for the training loop{}",
        request.wanted(), depth, request.num_workers, request.prefetch,
        request.held ? fmt::format(" + {} held", request.held) : std::string(),
        format_bytes(layout.segment_bytes(request.wanted())), format_bytes(memfd ? budget.memory_bytes : budget.bytes),
        memfd ? budget.memory_reason : budget.reason, fix.empty() ? "" : ". To restore it, " + fix));
  }
  return ReservedRing{std::move(*segment), depth, place.backing, std::move(warnings)};
}

}  // namespace stoker::detail
