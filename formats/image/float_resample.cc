#include "formats/image/float_resample.h"

#include <algorithm>

#include "formats/image/cpu_kernels.h"

namespace stoker::formats {

namespace {

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

#if defined(STOKER_X86_DISPATCH)
// The sums of horizontal_row_sse2, two pixels to a vector (AVX2, no FMA: the same operations on
// each pixel's lanes in the same order, so the same results). `pairs` holds each pair of pixels'
// weights as one vector per tap: pixel 2j's weight in lanes 0-3, pixel 2j + 1's in lanes 4-7.
// Pixel x's tap k, and pixels x and x + 1's tap k in one vector. (Functions, not lambdas: a lambda
// does not take its caller's target.)
template <int C>
__attribute__((target("avx2"), always_inline)) inline __m128 tap_pixel(const float* in, const int* first, int x,
                                                                       int k) {
  return _mm_loadu_ps(in + static_cast<std::size_t>(first[x] + k) * C);
}
template <int C>
__attribute__((target("avx2"), always_inline)) inline __m256 tap_pair(const float* in, const int* first, int x, int k) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(tap_pixel<C>(in, first, x, k)), tap_pixel<C>(in, first, x + 1, k),
                              1);
}

template <int C>
__attribute__((target("avx2"))) void horizontal_row_avx2(const float* in, float* out, int out_w, const int* first,
                                                         const int* count, const float* weights, const float* pairs,
                                                         int stride) {
  static_assert(C == 3 || C == 4);
  const std::size_t pair_floats = static_cast<std::size_t>(stride) * 8;
  int x = 0;
  // Four pixels at a time, as two pairs: two independent chains of additions.
  for (; x + 4 <= out_w; x += 4) {
    const float* wa = pairs + static_cast<std::size_t>(x / 2) * pair_floats;
    const float* wb = wa + pair_floats;
    const int both = std::min(std::min(count[x], count[x + 1]), std::min(count[x + 2], count[x + 3]));
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    for (int k = 0; k < both; ++k) {
      a = _mm256_add_ps(
          a, _mm256_mul_ps(_mm256_loadu_ps(wa + static_cast<std::size_t>(k) * 8), tap_pair<C>(in, first, x, k)));
      b = _mm256_add_ps(
          b, _mm256_mul_ps(_mm256_loadu_ps(wb + static_cast<std::size_t>(k) * 8), tap_pair<C>(in, first, x + 2, k)));
    }
    __m128 acc[4] = {_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(b),
                     _mm256_extractf128_ps(b, 1)};
    for (int j = 0; j < 4; ++j) {
      for (int k = both; k < count[x + j]; ++k) {
        const float w = weights[static_cast<std::size_t>(x + j) * stride + k];
        acc[j] = _mm_add_ps(acc[j], _mm_mul_ps(_mm_set1_ps(w), tap_pixel<C>(in, first, x + j, k)));
      }
    }
    // In order of x: each store writes over the previous pixel's fourth float.
    for (int j = 0; j < 4; ++j) _mm_storeu_ps(out + static_cast<std::size_t>(x + j) * C, acc[j]);
  }
  for (; x < out_w; ++x) {
    __m128 acc = _mm_setzero_ps();
    for (int k = 0; k < count[x]; ++k) {
      const float w = weights[static_cast<std::size_t>(x) * stride + k];
      acc = _mm_add_ps(acc, _mm_mul_ps(_mm_set1_ps(w), tap_pixel<C>(in, first, x, k)));
    }
    _mm_storeu_ps(out + static_cast<std::size_t>(x) * C, acc);
  }
}
#endif

// One output row from the rows its taps read: out[i] = sum over k of w[k] * rows[k][i], k in
// increasing order from 0.0f, as the sum kept over rows (acc_) adds them: the same results.
void vertical_sum(const float* const* rows, const float* w, int count, float* __restrict out, std::size_t n) {
  std::size_t i = 0;
#if defined(__SSE2__)
  for (; i + 4 <= n; i += 4) {
    __m128 a = _mm_setzero_ps();
    for (int k = 0; k < count; ++k) a = _mm_add_ps(a, _mm_mul_ps(_mm_set1_ps(w[k]), _mm_loadu_ps(rows[k] + i)));
    _mm_storeu_ps(out + i, a);
  }
#endif
  for (; i < n; ++i) {
    float a = 0.0f;
    for (int k = 0; k < count; ++k) a += w[k] * rows[k][i];
    out[i] = a;
  }
}

#if defined(STOKER_X86_DISPATCH)
// Eight at a time, multiplications and additions apart (AVX2 without FMA: no fused rounding).
__attribute__((target("avx2"))) void vertical_sum_avx2(const float* const* rows, const float* w, int count,
                                                       float* __restrict out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    for (int k = 0; k < count; ++k) {
      const __m256 wk = _mm256_set1_ps(w[k]);
      a = _mm256_add_ps(a, _mm256_mul_ps(wk, _mm256_loadu_ps(rows[k] + i)));
      b = _mm256_add_ps(b, _mm256_mul_ps(wk, _mm256_loadu_ps(rows[k] + i + 8)));
    }
    _mm256_storeu_ps(out + i, a);
    _mm256_storeu_ps(out + i + 8, b);
  }
  for (; i < n; ++i) {
    float a = 0.0f;
    for (int k = 0; k < count; ++k) a = a + w[k] * rows[k][i];
    out[i] = a;
  }
}

#endif

}  // namespace

// `in` and `out` have one float of slack past their ends (see horizontal_row_sse2); `pairs` as
// horizontal_row_avx2 takes them (nullptr: no AVX2 sums).
void horizontal_row(const float* in, float* out, int out_w, int c, const int* first, const int* count,
                    const float* weights, const float* pairs, int stride) {
#if defined(STOKER_X86_DISPATCH)
  if (pairs != nullptr) {
    if (c == 3) return horizontal_row_avx2<3>(in, out, out_w, first, count, weights, pairs, stride);
    if (c == 4) return horizontal_row_avx2<4>(in, out, out_w, first, count, weights, pairs, stride);
  }
#endif
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

void vertical_row(const float* const* rows, const float* w, int count, float* out, std::size_t n) {
#if defined(STOKER_X86_DISPATCH)
  if (use_avx2()) return vertical_sum_avx2(rows, w, count, out, n);
#endif
  vertical_sum(rows, w, count, out, n);
}

}  // namespace stoker::formats
