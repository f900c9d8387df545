#include "loader/plan/mix_order.h"

#include <fmt/format.h>

#include <cmath>
#include <numeric>
#include <utility>

#include "base/option_spelling.h"
#include "base/splitmix64.h"
#include "loader/plan/shuffle.h"
#include "stoker/error.h"
#include "stoker/option_values.h"

namespace stoker::detail {

std::vector<std::uint64_t> mix_weights(std::span<const Source> sources) {
  double total = 0;
  bool whole = true;
  for (std::size_t s = 0; s < sources.size(); ++s) {
    const double w = sources[s].weight;
    if (!(std::isfinite(w) && w > 0)) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("options: {} ('{}') has weight {}; a weight is a finite number above 0",
                              option_entry("mix", s), printable(sources[s].path), w));
    }
    whole = whole && w == std::floor(w);
    total += w;
  }
  if (!std::isfinite(total)) {
    std::size_t largest = 0;
    for (std::size_t s = 1; s < sources.size(); ++s)
      largest = sources[s].weight > sources[largest].weight ? s : largest;
    throw Error(ErrorCode::invalid_option,
                fmt::format("options: {} ('{}') has weight {}, too large for the weights' sum to be a finite "
                            "number: scale the weights down",
                            option_entry("mix", largest), printable(sources[largest].path), sources[largest].weight));
  }
  std::vector<std::uint64_t> weights;
  weights.reserve(sources.size());
  const bool as_given = whole && total <= static_cast<double>(kMixResolution);
  for (std::size_t s = 0; s < sources.size(); ++s) {
    const double w = as_given ? sources[s].weight
                              : std::floor(sources[s].weight * static_cast<double>(kMixResolution) / total + 0.5);
    // At most kMixResolution (w ≤ total): the cast below is defined.
    if (!(w <= static_cast<double>(kMixResolution))) {
      throw Error(ErrorCode::internal, fmt::format("a mix's weight {} scaled to {}", sources[s].weight, w));
    }
    weights.push_back(std::max<std::uint64_t>(1, static_cast<std::uint64_t>(w)));
  }
  const std::uint64_t divisor =
      std::accumulate(weights.begin(), weights.end(), std::uint64_t{0}, [](auto a, auto b) { return std::gcd(a, b); });
  for (auto& w : weights) w /= divisor;
  return weights;
}

MixTable::MixTable(std::vector<std::uint64_t> weights, const std::vector<std::uint64_t>& samples, Order order,
                   std::uint64_t seed)
    : order_(order) {
  const std::uint64_t streams = splitmix64_mix(seed ^ kMixStreamTag);
  std::uint64_t first = 0;
  for (std::size_t s = 0; s < weights.size(); ++s) {
    members_.push_back(Member{first, samples[s], weights[s], splitmix64_mix(streams + s)});
    first += samples[s];
    period_ += weights[s];
  }
  // One period of the smooth weighted round robin: every source's credit grows by its weight, the
  // one with the most (the first of equals) is drawn and pays the period. Each source is drawn
  // exactly w_s times, and the credits are back at zero when the period ends.
  std::vector<std::int64_t> credit(members_.size(), 0);
  std::vector<std::uint32_t> count(members_.size(), 0);
  source_.resize(period_);
  ordinal_.resize(period_);
  for (std::uint64_t j = 0; j < period_; ++j) {
    std::size_t best = 0;
    for (std::size_t s = 0; s < members_.size(); ++s) {
      credit[s] += static_cast<std::int64_t>(members_[s].weight);
      if (credit[s] > credit[best]) best = s;
    }
    credit[best] -= static_cast<std::int64_t>(period_);
    source_[j] = static_cast<std::uint32_t>(best);
    ordinal_[j] = count[best]++;
  }
}

std::uint64_t MixTable::sample(std::uint64_t position) const noexcept {
  const std::uint64_t offset = position % period_;
  const Member& m = members_[source_[offset]];
  const std::uint64_t draw = position / period_ * m.weight + ordinal_[offset];
  const std::uint64_t pass = draw / m.samples, within = draw % m.samples;
  if (order_ == Order::sequential) return m.first + within;
  return m.first + FeistelPermutation(m.samples, m.stream, pass)(within);
}

std::vector<std::uint64_t> MixTable::drawn(std::uint64_t position) const {
  std::vector<std::uint64_t> out;
  out.reserve(members_.size());
  for (const Member& m : members_) out.push_back(position / period_ * m.weight);
  for (std::uint64_t j = 0; j < position % period_; ++j) ++out[source_[j]];
  return out;
}

std::string MixTable::describe() const {
  std::string out(name(order_));
  for (std::size_t s = 0; s < members_.size(); ++s)
    out += fmt::format("{}{}:{}", s == 0 ? ";" : ",", members_[s].weight, members_[s].samples);
  return out;
}

}  // namespace stoker::detail
