// The shuffle every order is made of (docs/sampler.md): a Fisher-Yates permutation driven by
// SplitMix64 from a stream chosen by (seed, epoch). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "stoker/export.h"

namespace stoker::detail {

// The generator state for (seed, epoch): mix(mix(seed) ^ epoch). Distinct pairs give unrelated
// streams; in particular (1, 0) and (0, 1) differ, unlike seed + epoch.
std::uint64_t epoch_stream(std::uint64_t seed, std::uint64_t epoch) noexcept;

// Fisher-Yates from the top: for i = n-1 down to 1, j = (next() * (i + 1)) >> 64 (a 128-bit
// product), swap(p[i], p[j]); p starts as the identity.
std::vector<std::uint64_t> permutation(std::uint64_t n, std::uint64_t seed, std::uint64_t epoch);

}  // namespace stoker::detail
