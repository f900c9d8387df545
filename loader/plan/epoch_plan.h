// EpochPlan: one epoch's batches, the sampler's order cut into batches of batch_size.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace stoker::detail {

struct EpochPlan {
  std::uint64_t epoch = 0;
  std::vector<std::uint64_t> order;  // this rank's samples of the epoch, in delivery order
  std::size_t batch_size = 1;
  std::uint64_t num_batches = 0;

  std::span<const std::uint64_t> batch(std::uint64_t b) const noexcept {
    const std::uint64_t first = b * batch_size;
    const std::uint64_t n = std::min<std::uint64_t>(batch_size, order.size() - first);
    return {order.data() + first, n};
  }
};

}  // namespace stoker::detail
