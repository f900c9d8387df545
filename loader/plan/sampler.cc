#include "loader/plan/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "loader/plan/quasi_random.h"
#include "loader/plan/shuffle.h"
#include "stoker/error.h"
#include "stoker/option_values.h"

namespace stoker::detail {

Sampler::Sampler(std::uint64_t num_samples, std::size_t batch_size, Order order, std::uint64_t seed, Shard shard,
                 bool drop_last, std::uint64_t group, std::vector<std::uint64_t> shard_samples,
                 std::shared_ptr<const MixTable> mix)
    : num_samples_(num_samples),
      batch_size_(batch_size),
      order_(order),
      group_(std::max<std::uint64_t>(group, 1)),
      shard_samples_(shard_samples.size() > 1 ? std::move(shard_samples) : std::vector<std::uint64_t>{}),
      mix_(std::move(mix)),
      seed_(seed),
      shard_(shard),
      drop_last_(drop_last) {
  if (batch_size == 0) throw Error(ErrorCode::invalid_option, "options: batch_size is 0; it must be at least 1");
  if (shard.world_size == 0)
    throw Error(ErrorCode::invalid_option, "options: shard.world_size is 0; it must be at least 1");
  if (shard.rank >= shard.world_size) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("options: shard.rank {} is not below shard.world_size {}", shard.rank, shard.world_size));
  }
}

std::uint64_t Sampler::per_rank(std::uint64_t skip) const noexcept {
  const std::uint64_t left = skip < num_samples_ ? num_samples_ - skip : 0;
  const std::uint64_t world = shard_.world_size;
  return drop_last_ ? left / world : (left + world - 1) / world;
}

std::uint64_t Sampler::batches_per_epoch(std::uint64_t skip) const noexcept {
  const std::uint64_t p = per_rank(skip);
  return drop_last_ ? p / batch_size_ : (p + batch_size_ - 1) / batch_size_;
}

std::uint64_t Sampler::samples_per_epoch(std::uint64_t skip) const noexcept {
  return drop_last_ ? batches_per_epoch(skip) * batch_size_ : per_rank(skip);
}

std::uint64_t Sampler::consumed_after(std::uint64_t skip, std::uint64_t batches) const noexcept {
  // Rank r's k-th sample is position skip + r + k * W of the order (padding aside): after each rank
  // delivered n samples, positions [skip, skip + n * W) are done, except those past the end (padding).
  const std::uint64_t n = std::min<std::uint64_t>(batches * batch_size_, samples_per_epoch(skip));
  const std::uint64_t left = skip < num_samples_ ? num_samples_ - skip : 0;
  return skip + std::min<std::uint64_t>(n * shard_.world_size, left);
}

std::string Sampler::order_description() const {
  if (mix_) return fmt::format("mix({})", mix_->describe());
  const std::string_view order = name(order_);
  if (order_ != Order::quasi_random) return std::string(order);
  // A shard set's groups start at each shard, and its shards are interleaved: another order than
  // one file's, so a state saved before shard sets were interleaved is refused.
  if (!shard_samples_.empty()) {
    return fmt::format("{}(group={},window={},interleave={})", order, group_, kQuasiRandomWindowGroups,
                       kQuasiRandomInterleavedShards);
  }
  return fmt::format("{}(group={},window={})", order, group_, kQuasiRandomWindowGroups);
}

EpochOrder Sampler::global_order(std::uint64_t epoch) const {
  if (mix_) return EpochOrder(MixOrder(mix_, num_samples_, epoch));
  switch (order_) {
    case Order::random: return EpochOrder(FeistelPermutation(num_samples_, seed_, epoch));
    case Order::quasi_random:
      return EpochOrder(QuasiRandomOrder(num_samples_, group_, kQuasiRandomWindowGroups, seed_, epoch, shard_samples_));
    case Order::sequential: break;
  }
  return EpochOrder();
}

std::vector<std::uint64_t> Sampler::mix_drawn(std::uint64_t epoch, std::uint64_t consumed) const {
  if (!mix_) return {};
  return mix_->drawn(epoch * num_samples_ + consumed);
}

EpochPlan Sampler::plan(std::uint64_t epoch, std::uint64_t skip) const {
  EpochPlan p;
  p.epoch = epoch;
  p.order = global_order(epoch);
  p.skip = std::min(skip, num_samples_);
  p.left = num_samples_ - p.skip;
  p.rank = shard_.rank;
  p.world_size = shard_.world_size;
  p.batch_size = batch_size_;
  p.num_samples = samples_per_epoch(skip);
  p.num_batches = batches_per_epoch(skip);
  return p;
}

std::vector<std::uint64_t> Sampler::epoch_order(std::uint64_t epoch, std::uint64_t skip) const {
  const EpochPlan p = plan(epoch, skip);
  std::vector<std::uint64_t> mine(p.num_samples);
  for (std::uint64_t k = 0; k < p.num_samples; ++k) mine[k] = p.sample(k);
  return mine;
}

}  // namespace stoker::detail
