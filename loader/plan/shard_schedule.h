// ShardSchedule: which shard a loader fetches into a cache smaller than its shard set, and which it
// evicts, as an epoch goes on (docs/remote.md, "A cache smaller than the set"). The order is a pure
// function of (seed, epoch, position), so every shard read of the epoch is known when it starts:
// the schedule is Belady's policy over it (on a miss, evict the cached shard read again furthest in
// the future, or never), which fetches the fewest shards any policy can for that order and cache.
// Plain values, computed once per epoch; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "loader/plan/epoch_plan.h"

namespace stoker::detail {

// The shards each batch of an epoch reads, batch `first` on: for batch b, of(b) lists them, sorted
// and without repeats. Shards are numbered as in the set.
struct BatchShards {
  std::uint64_t first = 0;
  std::vector<std::uint64_t> begin;  // of(b) is shards[begin[b - first], begin[b - first + 1])
  std::vector<std::uint32_t> shards;

  std::uint64_t end() const noexcept { return first + (begin.empty() ? 0 : begin.size() - 1); }
  std::span<const std::uint32_t> of(std::uint64_t b) const noexcept {
    return {shards.data() + begin[b - first], shards.data() + begin[b - first + 1]};
  }
};

// The shards that batches [first, plan.num_batches) of `plan` read, of those for which counted[k]
// is true (the others, local files, are always there). `starts`: the shards' first samples, and
// the set's sample count last (prefix sums of the shards' samples, one more than the shards).
BatchShards batch_shards(const EpochPlan& plan, std::uint64_t first, const std::vector<std::uint64_t>& starts,
                         const std::vector<bool>& counted);

// One fetch of the schedule: `shard` fetched before batch `batch` (the first after it that reads
// it), `evict` removed first to make room. Batches before `evict_after` read `evict` for the last
// time before it comes back (if ever): it may go only once they are done.
struct FetchStep {
  std::uint64_t batch = 0;
  std::uint32_t shard = 0;
  std::optional<std::uint32_t> evict;
  std::uint64_t evict_after = 0;
};

struct ShardSchedule {
  std::vector<FetchStep> steps;  // in the order they are taken
  // Per batch from reads.first: steps [0, steps_before[b - first]) are done before batch b is read.
  std::vector<std::size_t> steps_before;
  std::vector<std::uint32_t> cached_at_end;  // the cache's shards after the epoch, sorted
};

// Belady's schedule for `reads` through a cache of `capacity` shards holding `cached` at the start
// (at most `capacity`, never read before reads.first). Every shard a batch reads is in the cache
// while it is read. Throws stoker::Error (ErrorCode::invalid_option) when a batch reads more than
// `capacity` shards, naming it and how many.
ShardSchedule belady_schedule(const BatchShards& reads, std::size_t capacity, const std::vector<std::uint32_t>& cached);

// The fetches an LRU cache of `capacity` shards would make for `reads` from `cached` (the least
// recently read evicted first; a batch's shards all count as read when it is): for comparison.
// REQUIRES: no batch reads more than `capacity` shards.
std::uint64_t lru_fetches(const BatchShards& reads, std::size_t capacity, const std::vector<std::uint32_t>& cached);

}  // namespace stoker::detail
