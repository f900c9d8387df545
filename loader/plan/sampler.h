// Sampler: the order in which an epoch visits samples, and how it is cut into batches and shards.
// The permutation is specified exactly in docs/sampler.md so that any platform, and a script in
// another language, reproduces it; it is computed per position, so that an epoch of 2^32 samples
// needs no table. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/plan/epoch_plan.h"
#include "stoker/options.h"

namespace stoker::detail {

class Sampler {
 public:
  // Throws stoker::Error for batch_size 0 or a malformed shard.
  // `group`: consecutive samples stored together, for Order::quasi_random; `shard_samples`: the
  // samples of each shard of a shard set (empty for one file), whose groups it keeps apart. With
  // `mix` (order random or sequential), `num_samples` is the mix's draws per epoch, each epoch
  // the mix's next draws (loader/plan/mix_order.h).
  Sampler(std::uint64_t num_samples, std::size_t batch_size, Order order, std::uint64_t seed, Shard shard,
          bool drop_last, std::uint64_t group = 1, std::vector<std::uint64_t> shard_samples = {},
          std::shared_ptr<const MixTable> mix = nullptr);

  // For an epoch that starts at position `skip` of its global order (0, or a resumed
  // LoaderState::consumed): this rank's samples after drop_last, and its batches.
  std::uint64_t samples_per_epoch(std::uint64_t skip = 0) const noexcept;
  std::uint64_t batches_per_epoch(std::uint64_t skip = 0) const noexcept;

  // This rank's batches for `epoch` from global position `skip` on: positions [skip, N) of the
  // global order, sharded and cut into batches.
  EpochPlan plan(std::uint64_t epoch, std::uint64_t skip = 0) const;
  // The plan's samples in delivery order (samples_per_epoch(skip) of them): for tests.
  std::vector<std::uint64_t> epoch_order(std::uint64_t epoch, std::uint64_t skip = 0) const;

  // The global positions delivered by all ranks together once each has delivered `batches`
  // batches of an epoch started at `skip`: they form the prefix [0, consumed_after(...)).
  std::uint64_t consumed_after(std::uint64_t skip, std::uint64_t batches) const noexcept;

  std::uint64_t num_samples() const noexcept { return num_samples_; }
  std::uint64_t seed() const noexcept { return seed_; }
  Order order() const noexcept { return order_; }
  std::uint64_t group() const noexcept { return group_; }
  // "sequential", "random", "quasi_random(group=256,window=4)" ("...,interleave=8)" for a shard
  // set), "mix(random;3:1200,1:800)": what the order depends on.
  std::string order_description() const;
  // The epoch's global order of all samples (before sharding), per position.
  EpochOrder global_order(std::uint64_t epoch) const;
  // With a mix: the draws of each source before position `consumed` of `epoch`; else empty.
  std::vector<std::uint64_t> mix_drawn(std::uint64_t epoch, std::uint64_t consumed) const;

 private:
  std::uint64_t num_samples_;
  std::size_t batch_size_;
  Order order_;
  std::uint64_t group_;
  std::vector<std::uint64_t> shard_samples_;
  std::shared_ptr<const MixTable> mix_;
  std::uint64_t seed_;
  Shard shard_;
  bool drop_last_;
  // Samples each rank gets before batching, from position `skip` on.
  std::uint64_t per_rank(std::uint64_t skip) const noexcept;
};

}  // namespace stoker::detail
