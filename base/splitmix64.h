// SplitMix64 (Steele, Lea and Flood's generator, as in Java's SplittableRandom): the one source of
// pseudo-random numbers in stoker's orders and pipelines, specified in docs/sampler.md so that a
// script in another language reproduces them. Header-only; plain values.
#pragma once

#include <cstdint>

namespace stoker::detail {

// SplitMix64's output function (a bijection of 64-bit words).
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The generator: the state advances by the golden-ratio increment, each output is its mix.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(std::uint64_t state) noexcept : state_(state) {}
  constexpr std::uint64_t next() noexcept { return splitmix64_mix(state_ += 0x9e3779b97f4a7c15ULL); }

 private:
  std::uint64_t state_;
};

}  // namespace stoker::detail
