// The shuffle every order is made of (docs/sampler.md): a keyed bijection of [0, n), a balanced
// Feistel network over the smallest even power of two that holds n (at least 2^8) with cycle
// walking, keyed by SplitMix64 from a stream chosen by (seed, epoch). Each position's sample is
// computed on its own, in O(1) memory: no table of n entries is ever made. Plain values;
// thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::detail {

// The generator state for (seed, epoch): mix(mix(seed) ^ epoch). Distinct pairs give unrelated
// streams; in particular (1, 0) and (0, 1) differ, unlike seed + epoch.
std::uint64_t epoch_stream(std::uint64_t seed, std::uint64_t epoch) noexcept;

// The permutation p of [0, n) for (seed, epoch): p(i) for any i < n, and its inverse.
class FeistelPermutation {
 public:
  static constexpr int kRounds = 6;
  static constexpr int kMinHalfBits = 4;

  FeistelPermutation() = default;  // n = 0
  FeistelPermutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) noexcept;

  std::uint64_t size() const noexcept { return n_; }
  // REQUIRES: i < size().
  std::uint64_t operator()(std::uint64_t i) const noexcept;
  // inverse((*this)(i)) == i. REQUIRES: y < size().
  std::uint64_t inverse(std::uint64_t y) const noexcept;
  // v[k] = (*this)(v[k]) for k < count, the same values several times faster: eight positions go
  // through the rounds side by side, so that the multiplications of one overlap the others' instead
  // of each waiting on the one before (a batch's indices are computed on every task written).
  // REQUIRES: every v[k] < size().
  void apply(std::uint64_t* v, std::size_t count) const noexcept;

 private:
  std::uint64_t encrypt(std::uint64_t x) const noexcept;
  std::uint64_t decrypt(std::uint64_t x) const noexcept;

  std::uint64_t n_ = 0;
  int half_bits_ = kMinHalfBits;
  std::uint64_t mask_ = (std::uint64_t{1} << kMinHalfBits) - 1;
  std::array<std::uint64_t, kRounds> keys_{};
};

// The whole permutation, p(0), p(1), …, p(n-1): for tests and small tools, never for an epoch.
std::vector<std::uint64_t> permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch);

}  // namespace stoker::detail
