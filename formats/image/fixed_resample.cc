#include "formats/image/fixed_resample.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "base/scratch.h"
#include "formats/image/cpu_kernels.h"

namespace stoker::formats {

using detail::fit_scratch;

namespace {

constexpr int kMostPrecision = 22;  // PIL's: a sum of 255 * 2^22 fits an int32

std::uint8_t clamp_u8(std::int32_t sum, int precision) {
  const std::int32_t v = sum >> precision;
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

// One value at a time. Reads each position's taps rounded up to a pair (the last weight zero).
void horizontal_plain(const std::uint8_t* in, int c, const FixedTaps& t, std::uint8_t* out) {
  const std::int32_t half = std::int32_t{1} << (t.precision - 1);
  for (int x = 0; x < t.n; ++x) {
    const std::int16_t* w = &t.coef[static_cast<std::size_t>(x) * 2 * t.most_pairs];
    const std::uint8_t* p = in + static_cast<std::size_t>(t.first[x]) * c;
    for (int ch = 0; ch < c; ++ch) {
      std::int32_t sum = half;
      for (int k = 0; k < 2 * t.pairs[x]; ++k) sum += w[k] * p[k * c + ch];
      out[x * c + ch] = clamp_u8(sum, t.precision);
    }
  }
}

#if defined(STOKER_X86_DISPATCH)
// The shuffle that takes a pair of taps' pixels (C bytes each, from the first byte loaded) to 16-bit
// lanes, channel by channel: [ch0 of tap k, ch0 of tap k + 1, ch1 of k, ch1 of k + 1, ...], zeros
// after the last channel. A 16-bit multiply-add by [w_k, w_k+1, w_k, w_k+1, ...] then gives each
// channel's two products summed in a 32-bit lane.
// `from`: the pixels' first byte in the 16 loaded.
void pair_shuffle(int c, int from, std::int8_t* m) {
  for (int lane = 0; lane < 8; ++lane) {
    const int ch = lane / 2, tap = lane % 2;
    const std::size_t at = 2 * static_cast<std::size_t>(lane);
    m[at] = ch < c ? static_cast<std::int8_t>(from + tap * c + ch) : std::int8_t{-128};
    m[at + 1] = std::int8_t{-128};
  }
}
// Four pixels' 32-bit sums ([ch0, ch1, ch2, ch3] each) to their C * 4 bytes, packed from the first.
template <int C>
constexpr std::array<std::int8_t, 16> pack_shuffle() {
  std::array<std::int8_t, 16> m{};
  for (int i = 0; i < 16; ++i)
    m[static_cast<std::size_t>(i)] = i < 4 * C ? static_cast<std::int8_t>(i / C * 4 + i % C) : -128;
  return m;
}

// Eight positions at a time (positions are padded to a multiple of eight), two to a vector, each
// pair's taps from one 16-byte load per pair of taps, shuffled into place by the pair's own
// shuffle; then the eight sums, shifted back, packed to bytes in order.
// P: the pairs of taps, when known at compile time (unrolled), or 0 (t.most_pairs).
template <int C, int P>
__attribute__((target("avx2"))) void horizontal_avx2(const std::uint8_t* in, const FixedTaps& t, std::uint8_t* out) {
  static constexpr auto kPack = pack_shuffle<C>();
  const __m256i pack = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kPack.data())));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i half = _mm256_set1_epi32(std::int32_t{1} << (t.precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(t.precision);
  const int pairs = P > 0 ? P : t.most_pairs;
  const auto* shuffles = reinterpret_cast<const __m256i*>(t.shuffles.data());
  const auto* vectors = reinterpret_cast<const __m256i*>(t.vectors.data());
  for (int x = 0; x < t.n; x += 8) {
    __m256i sums[4];
    for (int j = 0; j < 4; ++j) {
      const int pair = x / 2 + j;
      const std::uint8_t* base =
          in + static_cast<std::size_t>(t.first[static_cast<std::size_t>(x) + 2 * static_cast<std::size_t>(j)]) * C;
      const __m256i shuffle = _mm256_loadu_si256(shuffles + pair);
      __m256i acc = half;
      for (int k = 0; k < pairs; ++k) {
        const __m256i px = _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + static_cast<std::size_t>(2 * C) * k)));
        acc = _mm256_add_epi32(
            acc, _mm256_madd_epi16(_mm256_shuffle_epi8(px, shuffle),
                                   _mm256_loadu_si256(vectors + static_cast<std::size_t>(pair) * pairs + k)));
      }
      sums[j] = _mm256_sra_epi32(acc, shift);
    }
    // [x0|x1], [x2|x3] -> 16-bit [x0 x2|x1 x3]; with [x4 x6|x5 x7], bytes [x0 x2 x4 x6|x1 x3 x5 x7];
    // in order, [x0 x1 x2 x3|x4 x5 x6 x7], four bytes each; each half's C-byte pixels packed.
    const __m256i bytes =
        _mm256_packus_epi16(_mm256_packs_epi32(sums[0], sums[1]), _mm256_packs_epi32(sums[2], sums[3]));
    const __m256i packed = _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(bytes, order), pack);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + static_cast<std::size_t>(x) * C), _mm256_castsi256_si128(packed));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + static_cast<std::size_t>(x + 4) * C),
                     _mm256_extracti128_si256(packed, 1));
  }
}

template <int C>
void horizontal_avx2_for(const std::uint8_t* in, const FixedTaps& t, std::uint8_t* out) {
  switch (t.most_pairs) {
    case 1: return horizontal_avx2<C, 1>(in, t, out);
    case 2: return horizontal_avx2<C, 2>(in, t, out);
    case 3: return horizontal_avx2<C, 3>(in, t, out);
    default: return horizontal_avx2<C, 0>(in, t, out);
  }
}
#endif

}  // namespace

int fixed_precision(float heaviest) {
  int precision = 0;
  while (precision < kMostPrecision && std::lround(heaviest * std::ldexp(1.0, precision + 1)) < (1 << 15)) ++precision;
  return std::max(precision, 1);
}

void quantize_taps(int n, const int* first, const int* count, const float* weights, int stride, int precision,
                   FixedTaps& out) {
  out.n = n;
  const int padded = (n + 7) / 8 * 8;
  out.channels = 0;
  int most = 0;
  for (int i = 0; i < n; ++i) most = std::max(most, count[i]);
  out.precision = precision;
  out.most_pairs = (most + 1) / 2;
  const std::size_t per = 2 * static_cast<std::size_t>(out.most_pairs);
  fit_scratch(out.first, static_cast<std::size_t>(padded));
  fit_scratch(out.pairs, static_cast<std::size_t>(padded));
  fit_scratch(out.coef, static_cast<std::size_t>(padded) * per);
  std::fill(out.coef.begin(), out.coef.end(), std::int16_t{0});
  const double scale = std::ldexp(1.0, out.precision);
  for (int i = 0; i < padded; ++i) {
    if (i >= n) {  // padding: reads where the last position reads, with no taps
      out.first[static_cast<std::size_t>(i)] = n > 0 ? first[n - 1] : 0;
      out.pairs[static_cast<std::size_t>(i)] = 0;
      continue;
    }
    out.first[static_cast<std::size_t>(i)] = first[i];
    out.pairs[static_cast<std::size_t>(i)] = (count[i] + 1) / 2;
    for (int k = 0; k < count[i]; ++k) {
      // PIL's rounding of a weight: half away from zero (weights are >= 0).
      const double w = weights[static_cast<std::size_t>(i) * stride + k];
      // NOLINTNEXTLINE(bugprone-incorrect-roundings): PIL's rounding, half up, of a weight >= 0
      out.coef[static_cast<std::size_t>(i) * per + k] = static_cast<std::int16_t>(static_cast<int>(0.5 + w * scale));
    }
  }
}

void prepare_rows(FixedTaps& t, int c) {
  t.channels = 0;
#if defined(STOKER_X86_DISPATCH)
  if ((c != 3 && c != 4) || !use_avx2()) return;
  const std::size_t positions = t.first.size(), pairs = positions / 2, per = 2 * static_cast<std::size_t>(t.most_pairs);
  // Both pixels of a pair, each pair of taps, within one 16-byte load from the first's.
  for (std::size_t p = 0; p < pairs; ++p) {
    if ((t.first[2 * p + 1] - t.first[2 * p] + 2) * c > 16) return;
  }
  fit_scratch(t.shuffles, pairs * 32);
  fit_scratch(t.vectors, pairs * static_cast<std::size_t>(t.most_pairs) * 16);
  for (std::size_t p = 0; p < pairs; ++p) {
    pair_shuffle(c, 0, &t.shuffles[p * 32]);
    pair_shuffle(c, (t.first[2 * p + 1] - t.first[2 * p]) * c, &t.shuffles[p * 32 + 16]);
    for (int k = 0; k < t.most_pairs; ++k) {
      std::int16_t* v = &t.vectors[(p * static_cast<std::size_t>(t.most_pairs) + static_cast<std::size_t>(k)) * 16];
      for (int side = 0; side < 2; ++side) {
        const std::int16_t* w =
            &t.coef[(2 * p + static_cast<std::size_t>(side)) * per + 2 * static_cast<std::size_t>(k)];
        for (int lane = 0; lane < 4; ++lane) {
          v[side * 8 + 2 * lane] = w[0];
          v[side * 8 + 2 * lane + 1] = w[1];
        }
      }
    }
  }
  t.channels = c;
#else
  (void)c;
#endif
}

std::size_t row_slack(const FixedTaps& t, int c) {
  // The vector kernel reads pairs of taps up to most_pairs from each position's first (weighted by
  // zero past its own), 16 bytes at a time.
  return (2 * static_cast<std::size_t>(t.most_pairs) + 1) * static_cast<std::size_t>(c) + 16;
}

void horizontal_fixed(const std::uint8_t* in, int c, const FixedTaps& t, std::uint8_t* out) {
#if defined(STOKER_X86_DISPATCH)
  if (t.channels == c) {
    if (c == 3) return horizontal_avx2_for<3>(in, t, out);
    if (c == 4) return horizontal_avx2_for<4>(in, t, out);
  }
#endif
  horizontal_plain(in, c, t, out);
}

#if defined(STOKER_X86_DISPATCH)
namespace {
// vertical_fixed's sums, 32 values at a time.
__attribute__((target("avx2"))) void vertical_avx2(const std::uint8_t* const* rows, const std::int16_t* coef, int count,
                                                   int precision, std::uint8_t* out, std::size_t n) {
  const __m256i zero = _mm256_setzero_si256(), half = _mm256_set1_epi32(std::int32_t{1} << (precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(precision);
  for (std::size_t i = 0; i < n; i += 32) {
    __m256i acc[4] = {half, half, half, half};
    for (int k = 0; k < count; k += 2) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[k] + i));
      const bool two = k + 1 < count;
      const __m256i b = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[k + 1] + i)) : zero;
      const std::uint32_t w = static_cast<std::uint16_t>(coef[k]) |
                              (two ? static_cast<std::uint32_t>(static_cast<std::uint16_t>(coef[k + 1])) << 16 : 0u);
      const __m256i ww = _mm256_set1_epi32(static_cast<std::int32_t>(w));
      // Within each 128-bit half, as vertical_fixed's SSE2 steps: the halves stay apart until the
      // packs below, which work within halves too, so the bytes come out in order.
      const __m256i lo = _mm256_unpacklo_epi8(a, b), hi = _mm256_unpackhi_epi8(a, b);
      acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), ww));
      acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), ww));
      acc[2] = _mm256_add_epi32(acc[2], _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), ww));
      acc[3] = _mm256_add_epi32(acc[3], _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), ww));
    }
    for (auto& v : acc) v = _mm256_sra_epi32(v, shift);
    const __m256i bytes = _mm256_packus_epi16(_mm256_packs_epi32(acc[0], acc[1]), _mm256_packs_epi32(acc[2], acc[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), bytes);
  }
}
}  // namespace
#endif

void vertical_fixed(const std::uint8_t* const* rows, const std::int16_t* coef, int count, int precision,
                    std::uint8_t* out, std::size_t n) {
#if defined(STOKER_X86_DISPATCH)
  if (use_avx2()) return vertical_avx2(rows, coef, count, precision, out, n);
#endif
  std::size_t i = 0;
#if defined(__SSE2__)
  // Sixteen values at a time, two rows to a multiply-add (rows and out have kFixedSlack bytes past n).
  const __m128i zero = _mm_setzero_si128(), half = _mm_set1_epi32(std::int32_t{1} << (precision - 1));
  const __m128i shift = _mm_cvtsi32_si128(precision);
  for (; i < n; i += 16) {
    __m128i acc[4] = {half, half, half, half};
    for (int k = 0; k < count; k += 2) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k] + i));
      const bool two = k + 1 < count;
      const __m128i b = two ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[k + 1] + i)) : zero;
      const std::uint32_t w = static_cast<std::uint16_t>(coef[k]) |
                              (two ? static_cast<std::uint32_t>(static_cast<std::uint16_t>(coef[k + 1])) << 16 : 0u);
      const __m128i ww = _mm_set1_epi32(static_cast<std::int32_t>(w));
      const __m128i lo = _mm_unpacklo_epi8(a, b), hi = _mm_unpackhi_epi8(a, b);
      acc[0] = _mm_add_epi32(acc[0], _mm_madd_epi16(_mm_unpacklo_epi8(lo, zero), ww));
      acc[1] = _mm_add_epi32(acc[1], _mm_madd_epi16(_mm_unpackhi_epi8(lo, zero), ww));
      acc[2] = _mm_add_epi32(acc[2], _mm_madd_epi16(_mm_unpacklo_epi8(hi, zero), ww));
      acc[3] = _mm_add_epi32(acc[3], _mm_madd_epi16(_mm_unpackhi_epi8(hi, zero), ww));
    }
    for (auto& v : acc) v = _mm_sra_epi32(v, shift);
    const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(acc[0], acc[1]), _mm_packs_epi32(acc[2], acc[3]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), bytes);
  }
#endif
  const std::int32_t half_plain = std::int32_t{1} << (precision - 1);
  for (; i < n; ++i) {
    std::int32_t sum = half_plain;
    for (int k = 0; k < count; ++k) sum += coef[k] * rows[k][i];
    out[i] = clamp_u8(sum, precision);
  }
}

}  // namespace stoker::formats
