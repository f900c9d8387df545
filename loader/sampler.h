// Sampler: the order in which an epoch visits samples, and how it is cut into batches and shards.
// The permutation is specified exactly in docs/sampler.md so that any platform, and a script in
// another language, reproduces it. Immutable after construction; thread-safe.
#pragma once

#include "stoker/export.h"

#include <cstdint>
#include <vector>

#include "stoker/options.h"

namespace stoker::detail {

// SplitMix64's output function (a bijection of 64-bit words).
STOKER_TOOLS_API std::uint64_t splitmix64_mix(std::uint64_t z) noexcept;

class STOKER_TOOLS_API SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) noexcept : state_(state) {}
  std::uint64_t next() noexcept;

 private:
  std::uint64_t state_;
};

// The generator state for (seed, epoch): mix(mix(seed) ^ epoch). Distinct pairs give unrelated
// streams; in particular (1, 0) and (0, 1) differ, unlike seed + epoch.
STOKER_TOOLS_API std::uint64_t epoch_stream(std::uint64_t seed, std::uint64_t epoch) noexcept;

// Fisher-Yates from the top: for i = n-1 down to 1, j = (next() * (i + 1)) >> 64 (a 128-bit
// product), swap(p[i], p[j]); p starts as the identity.
STOKER_TOOLS_API std::vector<std::uint64_t> permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch);

class Sampler {
 public:
  // Throws stoker::Error for batch_size 0 or a malformed shard.
  Sampler(std::uint64_t num_samples, std::size_t batch_size, bool shuffle, std::uint64_t seed, Shard shard,
          bool drop_last);

  std::uint64_t samples_per_epoch() const noexcept;  // this rank's, after drop_last
  std::uint64_t batches_per_epoch() const noexcept;

  // This rank's samples for `epoch`, in delivery order (samples_per_epoch() of them).
  std::vector<std::uint64_t> epoch_order(std::uint64_t epoch) const;

 private:
  std::uint64_t num_samples_;
  std::size_t batch_size_;
  bool shuffle_;
  std::uint64_t seed_;
  Shard shard_;
  bool drop_last_;
  std::uint64_t per_rank_;  // samples each rank gets before batching
};

}  // namespace stoker::detail
