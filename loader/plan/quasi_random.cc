#include "loader/plan/quasi_random.h"

#include <algorithm>

#include "loader/base/splitmix64.h"
#include "loader/plan/shuffle.h"

namespace stoker::detail {

std::vector<std::uint64_t> quasi_random_order(std::uint64_t n, std::uint64_t group, std::uint32_t window_groups,
                                              std::uint64_t seed, std::uint64_t epoch) {
  group = std::max<std::uint64_t>(group, 1);
  window_groups = std::max<std::uint32_t>(window_groups, 1);
  const std::uint64_t num_groups = (n + group - 1) / group;
  // Streams of their own, so that the group shuffle is not the random order's permutation:
  // seed' = mix(seed ^ tag) for the groups, mix(seed' ^ (window + 1)) for window w.
  const std::uint64_t group_seed = splitmix64_mix(seed ^ 0x7175617369726e64ULL);  // "quasirnd"
  const std::vector<std::uint64_t> groups = permutation(num_groups, group_seed, epoch);
  std::vector<std::uint64_t> order;
  order.reserve(n);
  std::vector<std::uint64_t> window;
  for (std::uint64_t first = 0, w = 0; first < num_groups; first += window_groups, ++w) {
    window.clear();
    for (std::uint64_t k = first; k < std::min<std::uint64_t>(first + window_groups, num_groups); ++k) {
      const std::uint64_t begin = groups[k] * group, end = std::min(begin + group, n);
      for (std::uint64_t i = begin; i < end; ++i) window.push_back(i);
    }
    const std::vector<std::uint64_t> mix = permutation(window.size(), splitmix64_mix(group_seed ^ (w + 1)), epoch);
    for (std::uint64_t p : mix) order.push_back(window[p]);
  }
  return order;
}

}  // namespace stoker::detail
