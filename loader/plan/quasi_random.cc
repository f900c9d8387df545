#include "loader/plan/quasi_random.h"

#include <algorithm>

#include "loader/base/splitmix64.h"

namespace stoker::detail {

QuasiRandomOrder::QuasiRandomOrder(std::uint64_t n, std::uint64_t group, std::uint32_t window_groups,
                                   std::uint64_t seed, std::uint64_t epoch) noexcept
    : group_(std::max<std::uint64_t>(group, 1)),
      window_groups_(std::max<std::uint32_t>(window_groups, 1)),
      num_groups_((n + group_ - 1) / group_),
      last_size_(n - (num_groups_ > 0 ? (num_groups_ - 1) * group_ : 0)),
      // Streams of their own, so that the group shuffle is not the random order's permutation:
      // seed' = mix(seed ^ tag) for the groups, mix(seed' ^ (window + 1)) for window w.
      group_seed_(splitmix64_mix(seed ^ 0x7175617369726e64ULL)),  // "quasirnd"
      epoch_(epoch),
      groups_(num_groups_, group_seed_, epoch) {
  if (num_groups_ > 0) short_window_ = groups_.inverse(num_groups_ - 1) / window_groups_;
}

std::uint64_t QuasiRandomOrder::operator()(std::uint64_t pos) const noexcept {
  // Every window holds K·G samples but the one with the last group (G - last_size fewer) and the
  // final one (fewer groups): window w starts at w·K·G, less the deficit once past the short window.
  const std::uint64_t full = window_groups_ * group_, deficit = group_ - last_size_;
  const std::uint64_t w = pos < (short_window_ + 1) * full - deficit ? pos / full : (pos + deficit) / full;
  const std::uint64_t start = w * full - (w > short_window_ ? deficit : 0);
  const std::uint64_t first = w * window_groups_, last = std::min(first + window_groups_, num_groups_);
  std::uint64_t size = 0;
  for (std::uint64_t j = first; j < last; ++j) size += group_size(groups_(j));
  // The window's samples, listed group by group; its k-th is listed sample q(k).
  std::uint64_t q = FeistelPermutation(size, splitmix64_mix(group_seed_ ^ (w + 1)), epoch_)(pos - start);
  for (std::uint64_t j = first;; ++j) {
    const std::uint64_t g = groups_(j), s = group_size(g);
    if (q < s) return g * group_ + q;
    q -= s;
  }
}

std::vector<std::uint64_t> quasi_random_order(std::uint64_t n, std::uint64_t group, std::uint32_t window_groups,
                                              std::uint64_t seed, std::uint64_t epoch) {
  const QuasiRandomOrder order(n, group, window_groups, seed, epoch);
  std::vector<std::uint64_t> out(n);
  for (std::uint64_t i = 0; i < n; ++i) out[i] = order(i);
  return out;
}

}  // namespace stoker::detail
