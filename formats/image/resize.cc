#include "formats/image/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "base/scratch.h"
#include "formats/image/cpu_kernels.h"
#include "formats/image/planes.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STOKER_X86_DISPATCH 1
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

void vertical_row(const float* const* rows, const float* w, int count, float* out, std::size_t n) {
#if defined(STOKER_X86_DISPATCH)
  if (use_avx2()) return vertical_sum_avx2(rows, w, count, out, n);
#endif
  vertical_sum(rows, w, count, out, n);
}

}  // namespace

const float* Resizer::pair_weights(int c) {
#if defined(STOKER_X86_DISPATCH)
  // Only where the table stays small: a few taps per pixel (shrinking up to about 3.5 times).
  if ((c == 3 || c == 4) && horizontal_.stride <= kMostPairTaps && use_avx2()) {
    const Taps& t = horizontal_;
    const std::size_t n = t.first.size(), pair_floats = static_cast<std::size_t>(t.stride) * 8;
    fit_scratch(pairs_, (n + 1) / 2 * pair_floats);
    for (std::size_t x = 0; x < n; ++x) {
      float* p = &pairs_[x / 2 * pair_floats + (x % 2) * 4];
      for (int k = 0; k < t.stride; ++k) {
        std::fill_n(p + static_cast<std::size_t>(k) * 8, 4, t.weights[x * static_cast<std::size_t>(t.stride) + k]);
      }
    }
    return pairs_.data();
  }
#endif
  (void)c;
  return nullptr;
}

template <class T>
void Resizer::store(const float* row, T* dst, int y, int out_h, int out_w, int c, Layout layout) {
  const std::size_t out_row = static_cast<std::size_t>(out_w) * c;
  if (!layout.planar && !layout.mirrored) return store_row(row, dst + static_cast<std::size_t>(y) * out_row, out_row);
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    if (layout.planar) {
      fit_scratch(bytes_, out_row);
      store_row(row, bytes_.data(), out_row);
      std::uint8_t* planes[4];
      if (c <= 4) {
        for (int ch = 0; ch < c; ++ch) {
          planes[ch] = dst + (static_cast<std::size_t>(ch) * out_h + y) * static_cast<std::size_t>(out_w);
        }
        return row_to_planes(bytes_.data(), out_w, c, planes, layout.mirrored);
      }
    }
  }
  // Value by value: floats, other channel counts, and mirrored pixels kept interleaved.
  for (int x = 0; x < out_w; ++x) {
    const int to = layout.mirrored ? out_w - 1 - x : x;
    for (int ch = 0; ch < c; ++ch) {
      const std::size_t at = layout.planar
                                 ? (static_cast<std::size_t>(ch) * out_h + y) * static_cast<std::size_t>(out_w) + to
                                 : static_cast<std::size_t>(y) * out_row + static_cast<std::size_t>(to) * c + ch;
      store_row(row + static_cast<std::size_t>(x) * c + ch, dst + at, 1);
    }
  }
}

template <class T>
void Resizer::run_impl(const T* src, int in_h, int in_w, int c, std::size_t src_row, T* dst, int full_h, int full_w,
                       const Window& window, Layout layout) {
  if (window.height <= 0 || window.width <= 0) return;
  // From here on the output is the window: its taps are those of the window's rows and columns
  // in the full resize.
  compute(in_w, full_w, window.x, window.width, horizontal_);
  compute(in_h, full_h, window.y, window.height, vertical_);
  const int out_h = window.height, out_w = window.width;
  const std::size_t out_row = static_cast<std::size_t>(out_w) * c;
  const std::size_t in_row = static_cast<std::size_t>(in_w) * c;
  fit_scratch(row_, out_row + 1);  // + horizontal_row's slack
  fit_scratch(sum_, out_row);
  fit_scratch(line_, in_row + 1);
  line_[in_row] = 0.0f;
  // The columns the window's taps read (all of them unless the window is a part of the width).
  const std::size_t cols_from = static_cast<std::size_t>(horizontal_.first.front()) * c;
  const std::size_t cols_to = static_cast<std::size_t>(horizontal_.first.back() + horizontal_.count.back()) * c;
  const float* pairs = pair_weights(c);
  // Input row r, resized horizontally, into `out` (out_row floats + 1 of slack). The row as floats
  // first (one vectorised conversion instead of one per tap). The floats beside the columns read
  // keep what an earlier row left there: the vector code may load one past a pixel, into a lane it
  // then drops.
  const auto resize_row = [&](int r, float* out) {
    const T* __restrict in = src + static_cast<std::size_t>(r) * src_row;
    float* __restrict line = line_.data();
    for (std::size_t i = cols_from; i < cols_to; ++i) line[i] = static_cast<float>(in[i]);
    horizontal_row(line_.data(), out, out_w, c, horizontal_.first.data(), horizontal_.count.data(),
                   horizontal_.weights.data(), pairs, horizontal_.stride);
  };
  const int taps = std::max(*std::max_element(vertical_.count.begin(), vertical_.count.end()), 1);
  if (taps <= out_h) {
    // The rows an output row reads, in a ring of `taps` rows: each output row is summed once, from
    // its taps, and stored at once. Its first row never decreases with y, so once row y's rows are
    // in the ring, the rows before them are read by no later output row.
    const std::size_t ring_row = out_row + 1;
    fit_scratch(ring_, static_cast<std::size_t>(taps) * ring_row);
    const float* rows[64];
    std::vector<const float*> many;
    const float** tap_rows = rows;
    if (taps > 64) {
      many.resize(static_cast<std::size_t>(taps));
      tap_rows = many.data();
    }
    int next = 0;  // the next input row to resize
    for (int y = 0; y < out_h; ++y) {
      const int first = vertical_.first[static_cast<std::size_t>(y)],
                count = vertical_.count[static_cast<std::size_t>(y)];
      next = std::max(next, first);
      for (; next < first + count; ++next) resize_row(next, &ring_[static_cast<std::size_t>(next % taps) * ring_row]);
      for (int k = 0; k < count; ++k) tap_rows[k] = &ring_[static_cast<std::size_t>((first + k) % taps) * ring_row];
      vertical_row(tap_rows, &vertical_.weights[static_cast<std::size_t>(y) * vertical_.stride], count, sum_.data(),
                   out_row);
      store(sum_.data(), dst, y, out_h, out_w, c, layout);
    }
    return;
  }
  // Taps taller than the output (a strip shrunk a hundredfold): each output row's sum is built up
  // one input row at a time, so that memory is the output's (as floats) and one input row, however
  // tall the input: a 1 x 10^6 strip resized to 224 x 224 needs 600 KB, not the 2.7 GB that keeping
  // every horizontally resized row took. Output row y adds input rows first[y] .. first[y] +
  // count[y] - 1 in increasing order, the order of the ring's sums: the same results, float for float.
  fit_scratch(acc_, static_cast<std::size_t>(out_h) * out_row);
  std::fill(acc_.begin(), acc_.end(), 0.0f);
  // Output rows before `open` have had all their input rows. Both ends of the rows' windows grow
  // with y (their centres do, and every window has the filter's width or is cut by the image's
  // edge), so the rows that read input row r are `open` onwards, while their window starts by r.
  int open = 0;
  for (int r = vertical_.first.front(); r < in_h && open < out_h; ++r) {
    while (open < out_h && vertical_.first[open] + vertical_.count[open] <= r) ++open;
    if (open == out_h || vertical_.first[open] > r) continue;  // a row no output reads
    resize_row(r, row_.data());
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
  for (int y = 0; y < out_h; ++y) store(&acc_[static_cast<std::size_t>(y) * out_row], dst, y, out_h, out_w, c, layout);
}

std::size_t Resizer::scratch_bytes() const noexcept {
  const auto taps = [](const Taps& t) {
    return t.first.capacity() * sizeof(int) + t.count.capacity() * sizeof(int) + t.weights.capacity() * sizeof(float);
  };
  return taps(horizontal_) + taps(vertical_) +
         (acc_.capacity() + ring_.capacity() + sum_.capacity() + row_.capacity() + line_.capacity() +
          pairs_.capacity()) *
             sizeof(float) +
         bytes_.capacity();
}

void Resizer::run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
                  int out_w) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, Window{0, 0, out_h, out_w}, Layout{});
}

void Resizer::run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, Window{0, 0, out_h, out_w}, Layout{});
}

void Resizer::run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
                  int out_w, const Window& window) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, window, Layout{});
}

void Resizer::run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w,
                  const Window& window) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, window, Layout{});
}

void Resizer::run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
                  int out_w, const Window& window, Layout layout) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, window, layout);
}

void Resizer::run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w,
                  const Window& window, Layout layout) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w, window, layout);
}

}  // namespace stoker::formats
