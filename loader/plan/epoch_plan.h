// EpochPlan: one epoch's batches for this rank, the sampler's order cut into shards and batches,
// computed per position when a task is written (docs/sampler.md): the plan is a few words whatever
// the number of samples, and batch b's indices cost O(batch_size) to compute. Plain values;
// thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "loader/plan/mix_order.h"
#include "loader/plan/quasi_random.h"
#include "loader/plan/shuffle.h"
#include "stoker/options.h"

namespace stoker::detail {

// The epoch's global order p (all N samples, before sharding) as a function of the position.
class EpochOrder {
 public:
  EpochOrder() = default;  // sequential
  explicit EpochOrder(FeistelPermutation random) noexcept : order_(Order::random), random_(random) {}
  explicit EpochOrder(QuasiRandomOrder quasi) noexcept : order_(Order::quasi_random), quasi_(std::move(quasi)) {}
  // A mix's epoch: N is its draws per epoch, and its values index the sources' concatenation.
  explicit EpochOrder(MixOrder mix) noexcept : mixed_(true), mix_(std::move(mix)) {}

  // REQUIRES: pos < N.
  std::uint64_t operator()(std::uint64_t pos) const noexcept {
    if (mixed_) return mix_(pos);
    switch (order_) {
      case Order::random: return random_(pos);
      case Order::quasi_random: return quasi_(pos);
      case Order::sequential: break;
    }
    return pos;
  }
  // v[k] = (*this)(v[k]) for k < count.
  void apply(std::uint64_t* v, std::size_t count) const noexcept {
    if (mixed_) {
      for (std::size_t k = 0; k < count; ++k) v[k] = mix_(v[k]);
      return;
    }
    switch (order_) {
      case Order::random: return random_.apply(v, count);
      case Order::quasi_random:
        for (std::size_t k = 0; k < count; ++k) v[k] = quasi_(v[k]);
        return;
      case Order::sequential: break;
    }
  }

 private:
  Order order_ = Order::sequential;
  FeistelPermutation random_;
  QuasiRandomOrder quasi_;
  bool mixed_ = false;
  MixOrder mix_;
};

struct EpochPlan {
  std::uint64_t epoch = 0;
  EpochOrder order;
  std::uint64_t skip = 0;  // the epoch starts at this global position (0, or a resumed state's)
  std::uint64_t left = 0;  // positions [skip, N)
  std::uint64_t rank = 0;
  std::uint64_t world_size = 1;
  std::size_t batch_size = 1;
  std::uint64_t num_samples = 0;  // this rank's samples of the epoch, after drop_last
  std::uint64_t num_batches = 0;

  // This rank's k-th sample (k < num_samples): position r + k·W of p[skip:], padded by wrapping
  // around p[skip:] (DistributedSampler).
  std::uint64_t sample(std::uint64_t k) const noexcept { return order(position(k)); }
  // Its position in the epoch's order.
  std::uint64_t position(std::uint64_t k) const noexcept { return skip + (rank + k * world_size) % left; }
  // Samples in batch b (b < num_batches).
  std::uint64_t batch_length(std::uint64_t b) const noexcept {
    return std::min<std::uint64_t>(batch_size, num_samples - b * batch_size);
  }
  // Writes batch b's batch_length(b) sample indices to out.
  void batch(std::uint64_t b, std::uint64_t* out) const noexcept {
    const std::uint64_t first = b * batch_size, n = batch_length(b);
    for (std::uint64_t k = 0; k < n; ++k) out[k] = position(first + k);
    order.apply(out, static_cast<std::size_t>(n));
  }
  std::vector<std::uint64_t> batch(std::uint64_t b) const {
    std::vector<std::uint64_t> out(batch_length(b));
    batch(b, out.data());
    return out;
  }
};

}  // namespace stoker::detail
