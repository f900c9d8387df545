#include "loader/plan/shuffle.h"

#include <numeric>
#include <utility>

#include "loader/base/splitmix64.h"

namespace stoker::detail {

std::uint64_t epoch_stream(std::uint64_t seed, std::uint64_t epoch) noexcept {
  return splitmix64_mix(splitmix64_mix(seed) ^ epoch);
}

std::vector<std::uint64_t> permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch) {
  std::vector<std::uint64_t> p(n);
  std::iota(p.begin(), p.end(), std::uint64_t{0});
  SplitMix64 rng(epoch_stream(seed, epoch));
  for (std::uint64_t i = n; i-- > 1;) {
    __extension__ using u128 = unsigned __int128;
    auto j = static_cast<std::uint64_t>((static_cast<u128>(rng.next()) * (i + 1)) >> 64);
    std::swap(p[i], p[j]);
  }
  return p;
}

}  // namespace stoker::detail
