// The quasi-random order (FFCV's "quasi-random" idea): a shuffle that keeps locality, so that data
// stored in chunks (gzip-compressed HDF5 above all) is read and inflated about once per epoch
// instead of once per sample, while batches stay well mixed.
//
// With N samples, group size G (the rows of one HDF5 chunk of the dominant field, or of about 64
// KiB of records for LMDB and contiguous data: docs/sampler.md) and a window of K groups:
//   1. group g holds samples [g·G, min((g+1)·G, N)); the groups are shuffled;
//   2. the shuffled groups are taken K at a time (the last window may hold fewer), and the samples
//      of each window are shuffled among themselves;
//   3. the windows' samples, in window order, are the epoch's order.
// Every sample exactly once; a pure function of (N, G, K, seed, epoch), like the random order, and
// computed per position in O(1) memory (both shuffles are FeistelPermutations). Plain values;
// thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "loader/plan/shuffle.h"

namespace stoker::detail {

inline constexpr std::uint32_t kQuasiRandomWindowGroups = 4;

class QuasiRandomOrder {
 public:
  QuasiRandomOrder() = default;  // n = 0
  QuasiRandomOrder(std::uint64_t n, std::uint64_t group, std::uint32_t window_groups, std::uint64_t seed,
                   std::uint64_t epoch) noexcept;

  // The sample at position pos of the epoch. REQUIRES: pos < n.
  std::uint64_t operator()(std::uint64_t pos) const noexcept;

 private:
  std::uint64_t group_size(std::uint64_t g) const noexcept { return g + 1 == num_groups_ ? last_size_ : group_; }

  std::uint64_t group_ = 1;
  std::uint64_t window_groups_ = 1;
  std::uint64_t num_groups_ = 0;
  std::uint64_t last_size_ = 0;     // samples of the last group, 1..G
  std::uint64_t short_window_ = 0;  // the window that holds the last group
  std::uint64_t group_seed_ = 0;
  std::uint64_t epoch_ = 0;
  FeistelPermutation groups_;  // shuffled position -> group
};

// The whole order, for tests and small tools.
std::vector<std::uint64_t> quasi_random_order(std::uint64_t n, std::uint64_t group, std::uint32_t window_groups,
                                              std::uint64_t seed, std::uint64_t epoch);

}  // namespace stoker::detail
