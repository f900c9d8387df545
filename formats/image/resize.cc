#include "formats/image/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "base/scratch.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace stoker::formats {

using detail::fit_scratch;

void Resizer::compute(int in, int out, int first_out, int n_out, Taps& t) {
  const double scale = static_cast<double>(in) / out;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // the bilinear (triangle) filter's support is 1
  t.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  fit_scratch(t.first, static_cast<std::size_t>(n_out));
  fit_scratch(t.count, static_cast<std::size_t>(n_out));
  fit_scratch(t.weights, static_cast<std::size_t>(n_out) * t.stride);
  std::fill(t.weights.begin(), t.weights.end(), 0.0f);
  for (int i = 0; i < n_out; ++i) {
    const double center = (first_out + i + 0.5) * scale;
    // PIL's own rounding, truncation toward zero of x + 0.5 (also below zero), which the filter
    // must reproduce byte for byte: not lround.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);   // NOLINT(bugprone-incorrect-roundings)
    const int hi = std::min(static_cast<int>(center + support + 0.5), in);  // NOLINT(bugprone-incorrect-roundings)
    const int n = std::min(hi - lo, t.stride);
    double total = 0;
    float* w = &t.weights[static_cast<std::size_t>(i) * t.stride];
    for (int k = 0; k < n; ++k) {
      const double x = (lo + k - center + 0.5) / filter_scale;
      const double v = std::max(0.0, 1.0 - std::abs(x));
      w[k] = static_cast<float>(v);
      total += v;
    }
    if (total > 0) {
      for (int k = 0; k < n; ++k) w[k] = static_cast<float>(w[k] / total);
    }
    t.first[static_cast<std::size_t>(i)] = lo;
    t.count[static_cast<std::size_t>(i)] = n;
  }
}

namespace {

// Round half up and clamp: v + 0.5 truncated, once v is within [0, 255].
// Rounded half up and clamped to 0..255, 16 values at a time with SSE2 where there is SSE2 (GCC
// does not vectorise the float -> u8 conversion by itself), the rest one by one; the same results.
void store_row(const float* __restrict acc, std::uint8_t* __restrict out, std::size_t n) {
  std::size_t i = 0;
#if defined(__SSE2__)
  const __m128 zero = _mm_setzero_ps(), top = _mm_set1_ps(255.0f), half = _mm_set1_ps(0.5f);
  auto four = [&](std::size_t at) {
    return _mm_cvttps_epi32(_mm_add_ps(_mm_min_ps(_mm_max_ps(_mm_loadu_ps(acc + at), zero), top), half));
  };
  for (; i + 16 <= n; i += 16) {
    const __m128i low = _mm_packs_epi32(four(i), four(i + 4)), high = _mm_packs_epi32(four(i + 8), four(i + 12));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi16(low, high));
  }
#endif
  for (; i < n; ++i) {
    const float v = acc[i] < 0.0f ? 0.0f : acc[i] > 255.0f ? 255.0f : acc[i];
    out[i] =
        static_cast<std::uint8_t>(static_cast<std::int32_t>(v + 0.5f));  // NOLINT(bugprone-incorrect-roundings): v >= 0
  }
}
void store_row(const float* __restrict acc, float* __restrict out, std::size_t n) { std::copy(acc, acc + n, out); }

// One input row resized horizontally: out[x * C + ch] = sum_k w[x][k] * in[(first[x] + k) * C + ch].
// C is a compile-time constant for the common channel counts, so the channel loop unrolls.
template <int C>
void horizontal_row(const float* in, float* out, int out_w, const int* first, const int* count, const float* weights,
                    int stride) {
  for (int x = 0; x < out_w; ++x) {
    const float* w = weights + static_cast<std::size_t>(x) * stride;
    const float* p = in + static_cast<std::size_t>(first[x]) * C;
    float acc[C] = {};
    for (int k = 0; k < count[x]; ++k) {
      for (int ch = 0; ch < C; ++ch) acc[ch] += w[k] * p[k * C + ch];
    }
    for (int ch = 0; ch < C; ++ch) out[x * C + ch] = acc[ch];
  }
}

#if defined(__SSE2__)
// The same sums for C = 3 or 4, a pixel's channels as one vector: the same multiplications and
// additions in the same order, so the same results. With C = 3 each pixel is read and written as
// four floats, the fourth being the next pixel's first channel (written over at the next x): `in`
// must have one readable float past its end and `out` one writable float.
template <int C>
void horizontal_row_sse2(const float* in, float* out, int out_w, const int* first, const int* count,
                         const float* weights, int stride) {
  static_assert(C == 3 || C == 4);
  const auto tap = [&](__m128 acc, int x, int k) {
    const float w = weights[static_cast<std::size_t>(x) * stride + k];
    return _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(w), _mm_loadu_ps(in + static_cast<std::size_t>(first[x] + k) * C)));
  };
  // Four pixels at a time: four independent chains of additions instead of one waiting on itself.
  constexpr int kLanes = 4;
  int x = 0;
  for (; x + kLanes <= out_w; x += kLanes) {
    __m128 acc[kLanes];
    int both = count[x];
    for (int j = 0; j < kLanes; ++j) {
      acc[j] = _mm_setzero_ps();
      both = std::min(both, count[x + j]);
    }
    for (int k = 0; k < both; ++k) {
      for (int j = 0; j < kLanes; ++j) acc[j] = tap(acc[j], x + j, k);
    }
    for (int j = 0; j < kLanes; ++j) {
      for (int k = both; k < count[x + j]; ++k) acc[j] = tap(acc[j], x + j, k);
    }
    // In order of x: each store writes over the previous pixel's fourth float.
    for (int j = 0; j < kLanes; ++j) _mm_storeu_ps(out + static_cast<std::size_t>(x + j) * C, acc[j]);
  }
  for (; x < out_w; ++x) {
    __m128 a = _mm_setzero_ps();
    for (int k = 0; k < count[x]; ++k) a = tap(a, x, k);
    _mm_storeu_ps(out + static_cast<std::size_t>(x) * C, a);
  }
}
#endif

// `in` and `out` have one float of slack past their ends (see horizontal_row_sse2).
void horizontal_row(const float* in, float* out, int out_w, int c, const int* first, const int* count,
                    const float* weights, int stride) {
  switch (c) {
    case 1: return horizontal_row<1>(in, out, out_w, first, count, weights, stride);
#if defined(__SSE2__)
    case 3: return horizontal_row_sse2<3>(in, out, out_w, first, count, weights, stride);
    case 4: return horizontal_row_sse2<4>(in, out, out_w, first, count, weights, stride);
#else
    case 3: return horizontal_row<3>(in, out, out_w, first, count, weights, stride);
    case 4: return horizontal_row<4>(in, out, out_w, first, count, weights, stride);
#endif
    default: break;
  }
  for (int x = 0; x < out_w; ++x) {
    const float* w = weights + static_cast<std::size_t>(x) * stride;
    const float* p = in + static_cast<std::size_t>(first[x]) * c;
    for (int ch = 0; ch < c; ++ch) {
      float acc = 0;
      for (int k = 0; k < count[x]; ++k) acc += w[k] * p[k * c + ch];
      out[x * c + ch] = acc;
    }
  }
}

}  // namespace

template <class T>
void Resizer::run_impl(const T* src, int in_h, int in_w, int c, std::size_t src_row, T* dst, int full_h, int full_w,
                       const Window& window) {
  if (window.height <= 0 || window.width <= 0) return;
  // From here on the output is the window: its taps are those of the window's rows and columns
  // in the full resize.
  compute(in_w, full_w, window.x, window.width, horizontal_);
  compute(in_h, full_h, window.y, window.height, vertical_);
  const int out_h = window.height, out_w = window.width;
  const std::size_t out_row = static_cast<std::size_t>(out_w) * c;
  const std::size_t in_row = static_cast<std::size_t>(in_w) * c;
  // Each output row's sum is built up one input row at a time, so that memory is the output's
  // (as floats) and one input row, however tall the input: a 1 x 10^6 strip resized to 224 x 224
  // needs 600 KB, not the 2.7 GB that keeping every horizontally resized row took. Output row y
  // adds input rows first[y] .. first[y] + count[y] - 1 in increasing order, the order of the sum
  // over rows kept whole: the results are the same, float for float.
  fit_scratch(acc_, static_cast<std::size_t>(out_h) * out_row);
  std::fill(acc_.begin(), acc_.end(), 0.0f);
  fit_scratch(row_, out_row + 1);  // + horizontal_row's slack
  fit_scratch(line_, in_row + 1);
  line_[in_row] = 0.0f;
  // The columns the window's taps read (all of them unless the window is a part of the width).
  const std::size_t cols_from = static_cast<std::size_t>(horizontal_.first.front()) * c;
  const std::size_t cols_to = static_cast<std::size_t>(horizontal_.first.back() + horizontal_.count.back()) * c;
  // Output rows before `open` have had all their input rows. Both ends of the rows' windows grow
  // with y (their centres do, and every window has the filter's width or is cut by the image's
  // edge), so the rows that read input row r are `open` onwards, while their window starts by r.
  int open = 0;
  for (int r = vertical_.first.front(); r < in_h && open < out_h; ++r) {
    while (open < out_h && vertical_.first[open] + vertical_.count[open] <= r) ++open;
    if (open == out_h || vertical_.first[open] > r) continue;  // a row no output reads
    // The row as floats first (one vectorised conversion instead of one per tap). The floats
    // beside the columns read keep what an earlier row left there: the vector code may load one
    // past a pixel, into a lane it then drops.
    const T* __restrict in = src + static_cast<std::size_t>(r) * src_row;
    float* __restrict line = line_.data();
    for (std::size_t i = cols_from; i < cols_to; ++i) line[i] = static_cast<float>(in[i]);
    horizontal_row(line_.data(), row_.data(), out_w, c, horizontal_.first.data(), horizontal_.count.data(),
                   horizontal_.weights.data(), horizontal_.stride);
    const float* __restrict resized = row_.data();
    for (int y = open; y < out_h && vertical_.first[y] <= r; ++y) {
      const int k = r - vertical_.first[y];
      if (k >= vertical_.count[y]) continue;
      const float wk = vertical_.weights[static_cast<std::size_t>(y) * vertical_.stride + k];
      // Over contiguous memory, so that it vectorises.
      float* __restrict acc = &acc_[static_cast<std::size_t>(y) * out_row];
      for (std::size_t i = 0; i < out_row; ++i) acc[i] += wk * resized[i];
    }
  }
  for (int y = 0; y < out_h; ++y) {
    store_row(&acc_[static_cast<std::size_t>(y) * out_row], dst + static_cast<std::size_t>(y) * out_row, out_row);
  }
}

std::size_t Resizer::scratch_bytes() const noexcept {
  const auto taps = [](const Taps& t) {
    return t.first.capacity() * sizeof(int) + t.count.capacity() * sizeof(int) + t.weights.capacity() * sizeof(float);
  };
  return taps(horizontal_) + taps(vertical_) + (acc_.capacity() + row_.capacity() + line_.capacity()) * sizeof(float);
}

void Resizer::run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
                  int out_w) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, Window{0, 0, out_h, out_w});
}

void Resizer::run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, Window{0, 0, out_h, out_w});
}

void Resizer::run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
                  int out_w, const Window& window) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, window);
}

void Resizer::run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w,
                  const Window& window) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, window);
}

}  // namespace stoker::formats
