// Scratch buffers that follow the samples they serve: kept between samples (a warm worker does not
// allocate), grown for an outlier, and shed again once the samples after it need a small part of
// what the outlier took. A worker's memory then stays that of the samples it reads now, not the
// largest it ever read (one 100-megapixel image among thumbnails would otherwise keep ~300 MB of a
// worker's resident memory for the rest of its life). Header-only.
#pragma once

#include <cstddef>
#include <vector>

namespace stoker::detail {

// A buffer up to this size is kept whatever the samples need; a larger one is shed when a sample
// needs less than a quarter of it (the hysteresis keeps samples of similar sizes from reallocating
// in turn).
inline constexpr std::size_t kScratchKeepBytes = std::size_t{16} << 20;

// Whether a buffer of `capacity_bytes` is an outlier's for a sample that needs `need_bytes`.
constexpr bool scratch_is_outlier(std::size_t capacity_bytes, std::size_t need_bytes) noexcept {
  return capacity_bytes > kScratchKeepBytes && need_bytes < capacity_bytes / 4;
}

// `v` resized to `n` elements, its memory given back first when an outlier left it far larger.
template <class T>
void fit_scratch(std::vector<T>& v, std::size_t n) {
  if (scratch_is_outlier(v.capacity() * sizeof(T), n * sizeof(T))) {
    std::vector<T>().swap(v);
  }
  v.resize(n);
}

}  // namespace stoker::detail
