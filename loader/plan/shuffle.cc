#include "loader/plan/shuffle.h"

#include <algorithm>
#include <bit>

#include "base/splitmix64.h"

namespace stoker::detail {

std::uint64_t epoch_stream(std::uint64_t seed, std::uint64_t epoch) noexcept {
  return splitmix64_mix(splitmix64_mix(seed) ^ epoch);
}

FeistelPermutation::FeistelPermutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) noexcept : n_(n) {
  // b = bits of n - 1 (the largest value), h = max(4, ceil(b / 2)): the domain [0, 2^(2h)) holds
  // [0, n) and is less than 4n once n > 2^8, so cycle walking takes fewer than 4 steps on average.
  const int bits = n > 1 ? static_cast<int>(std::bit_width(n - 1)) : 0;
  half_bits_ = std::max(kMinHalfBits, (bits + 1) / 2);
  mask_ = (std::uint64_t{1} << half_bits_) - 1;
  SplitMix64 rng(epoch_stream(seed, epoch));
  for (auto& k : keys_) k = rng.next();
}

std::uint64_t FeistelPermutation::encrypt(std::uint64_t x) const noexcept {
  std::uint64_t l = x >> half_bits_, r = x & mask_;
  for (int k = 0; k < kRounds; ++k) {
    const std::uint64_t f = splitmix64_mix(r ^ keys_[k]) & mask_;
    const std::uint64_t next_r = l ^ f;
    l = r;
    r = next_r;
  }
  return (l << half_bits_) | r;
}

std::uint64_t FeistelPermutation::decrypt(std::uint64_t x) const noexcept {
  std::uint64_t l = x >> half_bits_, r = x & mask_;
  for (int k = kRounds; k-- > 0;) {
    const std::uint64_t prev_l = r ^ (splitmix64_mix(l ^ keys_[k]) & mask_);
    r = l;
    l = prev_l;
  }
  return (l << half_bits_) | r;
}

std::uint64_t FeistelPermutation::operator()(std::uint64_t i) const noexcept {
  // Cycle walking: i's cycle under encrypt() holds values below n (i itself), so this ends.
  std::uint64_t y = encrypt(i);
  while (y >= n_) y = encrypt(y);
  return y;
}

void FeistelPermutation::apply(std::uint64_t* v, std::size_t count) const noexcept {
  // Eight lanes, each walking one position's cycle; a lane whose value falls below n writes it and
  // takes the next position, so that no lane idles while another walks on (a cycle walk takes up to
  // four steps on average, and many more now and then).
  constexpr std::size_t kLanes = 8;
  if (count < kLanes) {
    for (std::size_t i = 0; i < count; ++i) v[i] = (*this)(v[i]);
    return;
  }
  std::uint64_t x[kLanes];
  std::size_t at[kLanes];   // the position each lane works for
  bool fresh[kLanes] = {};  // x is that position itself, not yet encrypted
  std::size_t next = 0;
  for (std::size_t j = 0; j < kLanes; ++j) {
    at[j] = next;
    x[j] = v[next++];
  }
  std::size_t busy = kLanes;
  while (busy == kLanes) {
    std::uint64_t l[kLanes], r[kLanes];
    for (std::size_t j = 0; j < kLanes; ++j) {
      l[j] = x[j] >> half_bits_;
      r[j] = x[j] & mask_;
    }
    for (int k = 0; k < kRounds; ++k) {
      for (std::size_t j = 0; j < kLanes; ++j) {
        const std::uint64_t next_r = l[j] ^ (splitmix64_mix(r[j] ^ keys_[k]) & mask_);
        l[j] = r[j];
        r[j] = next_r;
      }
    }
    for (std::size_t j = 0; j < kLanes; ++j) {
      x[j] = (l[j] << half_bits_) | r[j];
      fresh[j] = false;
      if (x[j] < n_) {
        v[at[j]] = x[j];
        if (next < count) {
          at[j] = next;
          x[j] = v[next++];
          fresh[j] = true;
        } else {
          at[j] = count;  // drained
          --busy;
        }
      }
    }
  }
  // The last few positions still walking, one by one: their walks go on from where they are.
  for (std::size_t j = 0; j < kLanes; ++j) {
    if (at[j] == count) continue;
    std::uint64_t y = fresh[j] ? encrypt(x[j]) : x[j];
    while (y >= n_) y = encrypt(y);
    v[at[j]] = y;
  }
}

std::uint64_t FeistelPermutation::inverse(std::uint64_t y) const noexcept {
  std::uint64_t x = decrypt(y);
  while (x >= n_) x = decrypt(x);
  return x;
}

std::vector<std::uint64_t> permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) {
  const FeistelPermutation p(n, seed, epoch);
  std::vector<std::uint64_t> out(n);
  for (std::uint64_t i = 0; i < n; ++i) out[i] = p(i);
  return out;
}

}  // namespace stoker::detail
