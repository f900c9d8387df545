#include "loader/plan/shard_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <list>
#include <set>
#include <unordered_map>
#include <utility>

#include "stoker/error.h"

namespace stoker::detail {
namespace {
constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();
}  // namespace

BatchShards batch_shards(const EpochPlan& plan, std::uint64_t first, const std::vector<std::uint64_t>& starts,
                         const std::vector<bool>& counted) {
  BatchShards out;
  out.first = first;
  out.begin.reserve(static_cast<std::size_t>(plan.num_batches - std::min(first, plan.num_batches)) + 1);
  out.begin.push_back(0);
  std::vector<std::uint64_t> indices;
  std::vector<std::uint32_t> batch;
  for (std::uint64_t b = first; b < plan.num_batches; ++b) {
    indices.resize(static_cast<std::size_t>(plan.batch_length(b)));
    plan.batch(b, indices.data());
    batch.clear();
    for (std::uint64_t i : indices) {
      // The shard k with starts[k] <= i < starts[k + 1].
      const auto k = static_cast<std::uint32_t>(std::upper_bound(starts.begin(), starts.end(), i) - starts.begin() - 1);
      if (counted[k]) batch.push_back(k);
    }
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    out.shards.insert(out.shards.end(), batch.begin(), batch.end());
    out.begin.push_back(out.shards.size());
  }
  return out;
}

ShardSchedule belady_schedule(const BatchShards& reads, std::size_t capacity,
                              const std::vector<std::uint32_t>& cached) {
  ShardSchedule out;
  const std::uint64_t first = reads.first, end = reads.end();
  // next[i]: the batch after the one of reads.shards[i] that reads the same shard next (kNever).
  std::vector<std::uint64_t> next(reads.shards.size(), kNever);
  std::unordered_map<std::uint32_t, std::uint64_t> next_read;  // while going backwards: the shard's next read
  for (std::uint64_t b = end; b-- > first;) {
    const std::uint64_t from = reads.begin[b - first];
    for (std::uint64_t i = from; i < reads.begin[b - first + 1]; ++i) {
      const auto it = next_read.find(reads.shards[i]);
      next[i] = it == next_read.end() ? kNever : it->second;
    }
    for (std::uint32_t s : reads.of(b)) next_read[s] = b;
  }
  // The cache by each shard's next read: the furthest is evicted first. A shard the current batch
  // reads has that batch as its key, the smallest of all: it goes only if every shard is the batch's.
  std::set<std::pair<std::uint64_t, std::uint32_t>> by_next;
  std::unordered_map<std::uint32_t, std::uint64_t> key, last_read;
  for (std::uint32_t s : cached) {
    const auto it = next_read.find(s);
    key[s] = it == next_read.end() ? kNever : it->second;
    by_next.emplace(key[s], s);
  }
  out.steps_before.reserve(static_cast<std::size_t>(end - first));
  for (std::uint64_t b = first; b < end; ++b) {
    const std::span<const std::uint32_t> shards = reads.of(b);
    if (shards.size() > capacity) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("batch {} reads {} shards, and the cache holds {} at once", b, shards.size(), capacity));
    }
    for (std::uint32_t s : shards) {  // hits first: none of the batch's shards makes room for another
      if (auto it = key.find(s); it != key.end()) {
        by_next.erase({it->second, s});
        it->second = b;
        by_next.emplace(b, s);
      }
    }
    for (std::uint32_t s : shards) {
      if (key.contains(s)) continue;
      FetchStep step{b, s, std::nullopt, first};
      if (by_next.size() == capacity) {
        const auto victim = *by_next.rbegin();  // read again furthest away; never one of this batch's
        by_next.erase(victim);
        key.erase(victim.second);
        step.evict = victim.second;
        if (auto r = last_read.find(victim.second); r != last_read.end()) step.evict_after = r->second + 1;
      }
      key[s] = b;
      by_next.emplace(b, s);
      out.steps.push_back(step);
    }
    out.steps_before.push_back(out.steps.size());
    const std::uint64_t from = reads.begin[b - first];
    for (std::uint64_t i = from; i < reads.begin[b - first + 1]; ++i) {
      const std::uint32_t s = reads.shards[i];
      by_next.erase({b, s});
      key[s] = next[i];
      by_next.emplace(next[i], s);
      last_read[s] = b;
    }
  }
  for (const auto& [k, s] : by_next) out.cached_at_end.push_back(s);
  std::sort(out.cached_at_end.begin(), out.cached_at_end.end());
  return out;
}

std::uint64_t lru_fetches(const BatchShards& reads, std::size_t capacity, const std::vector<std::uint32_t>& cached) {
  std::list<std::uint32_t> recent(cached.begin(), cached.end());  // most recently read first
  std::unordered_map<std::uint32_t, std::list<std::uint32_t>::iterator> where;
  for (auto it = recent.begin(); it != recent.end(); ++it) where[*it] = it;
  std::uint64_t fetches = 0;
  for (std::uint64_t b = reads.first; b < reads.end(); ++b) {
    const std::span<const std::uint32_t> shards = reads.of(b);
    for (std::uint32_t s : shards) {  // the batch's hits are the most recent before any eviction
      if (auto it = where.find(s); it != where.end()) recent.splice(recent.begin(), recent, it->second);
    }
    for (std::uint32_t s : shards) {
      if (where.contains(s)) continue;
      if (recent.size() == capacity) {
        where.erase(recent.back());
        recent.pop_back();
      }
      recent.push_front(s);
      where[s] = recent.begin();
      ++fetches;
    }
  }
  return fetches;
}

}  // namespace stoker::detail
