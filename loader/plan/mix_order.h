// A weighted mix (Options::mix): several datasets, concatenated into one index space, drawn by
// weight in a deterministic interleave (docs/sampler.md, "Mixes"), specified exactly so that a
// script in another language reproduces it.
//
// The mix is one endless sequence of draws, a pure function of (the integer weights, each source's
// samples, the order, the seed) and of the position P in it: epoch e of E samples is positions
// [e·E, (e+1)·E). Position P falls in period ⌊P / W⌋ (W: the weights' sum) at offset P mod W; a
// period is a smooth weighted round robin in which source s is drawn exactly w_s times, so its
// draws before P are counted in O(1) from a table of one period. The k-th draw of source s is
// sample k mod n_s of the source's pass ⌊k / n_s⌋, each pass a new shuffle of the source (or its
// samples in order, for Order::sequential): every pass draws every sample once, and a source that
// runs out starts its next pass without a word. Immutable values sharing their table; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/options.h"

namespace stoker::detail {

// The largest sum of integer weights used as given, and the resolution of the others.
inline constexpr std::uint64_t kMixResolution = 65536;
// The most draws an epoch of a mix may have: epochs of it reach 2^64 draws only after 2 epochs.
inline constexpr std::uint64_t kMaxMixDrawsPerEpoch = std::uint64_t{1} << 63;
// The sources' shuffles are keyed by streams of (seed ^ this), "mix": unrelated to the other orders'.
inline constexpr std::uint64_t kMixStreamTag = 0x6d6978;

// The weights as integers (docs/sampler.md): whole numbers summing to at most kMixResolution as
// they are, others scaled to kMixResolution in all and rounded (at least 1 each); then divided by
// their greatest common divisor. Throws stoker::Error (invalid_option) for a weight that is not a
// finite positive number, naming the source.
std::vector<std::uint64_t> mix_weights(std::span<const Source> sources);

class MixTable {
 public:
  struct Member {
    std::uint64_t first;    // the global index of its first sample
    std::uint64_t samples;  // n_s > 0
    std::uint64_t weight;   // w_s > 0
    std::uint64_t stream;   // the seed of its passes' shuffles
  };
  // `weights` from mix_weights(), `samples` each source's (all > 0); order random or sequential.
  MixTable(std::vector<std::uint64_t> weights, const std::vector<std::uint64_t>& samples, Order order,
           std::uint64_t seed);

  // The global index of draw P of the mix.
  std::uint64_t sample(std::uint64_t position) const noexcept;
  // Draws of each source before position P.
  std::vector<std::uint64_t> drawn(std::uint64_t position) const;

  const std::vector<Member>& members() const noexcept { return members_; }
  std::uint64_t period() const noexcept { return period_; }
  // "random;3:1200,1:800": the order, then each source's weight and samples.
  std::string describe() const;

 private:
  std::vector<Member> members_;
  std::uint64_t period_ = 0;            // W
  std::vector<std::uint32_t> source_;   // the source drawn at each offset of a period
  std::vector<std::uint32_t> ordinal_;  // that draw's count among its source's earlier ones in the period
  Order order_;
};

// Epoch `epoch` of `per_epoch` draws of a mix: position i is the mix's draw epoch·per_epoch + i.
class MixOrder {
 public:
  MixOrder() = default;
  MixOrder(std::shared_ptr<const MixTable> table, std::uint64_t per_epoch, std::uint64_t epoch) noexcept
      : table_(std::move(table)), first_(per_epoch * epoch) {}
  std::uint64_t operator()(std::uint64_t pos) const noexcept { return table_->sample(first_ + pos); }

 private:
  std::shared_ptr<const MixTable> table_;
  std::uint64_t first_ = 0;
};

}  // namespace stoker::detail
