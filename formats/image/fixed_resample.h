// The u8 resize in fixed point, as PIL resamples 8-bit images: each pass's sums are integers (the
// weights times 2^precision, rounded), rounded back to u8 after the rows' pass and again after the
// columns'. As in pillow-simd, the weights are 16-bit, with the highest precision that keeps every
// weight below 2^15, so that two taps take one 16-bit multiply-add. Kernels: the rows' pass with
// AVX2 (checked at run time) for 3 and 4 channels where each pair of adjacent pixels' taps lies
// within 16 bytes (shrinking up to about 3x), one value at a time otherwise; the columns' pass with
// AVX2, or SSE2. The values are within 1 of PIL's, whose weights have 22 bits (tests/tools/
// image_check.py checks photographs against PIL). Integer sums are exact in any order: every
// kernel gives the same bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stoker::formats {

// One pass's weights in fixed point, for positions [0, n) (padded to a multiple of 8 with
// positions of no taps).
struct FixedTaps {
  int n = 0;
  std::vector<int> first;          // per position: the first input position it reads
  std::vector<int> pairs;          // and how many pairs of taps (the last one's second weight 0 if odd)
  std::vector<std::int16_t> coef;  // 2 * most_pairs weights per position, zero past its taps
  int most_pairs = 0;
  int precision = 0;  // weights are w * 2^precision
  // For the AVX2 rows' pass (prepare_rows): per pair of positions, the byte shuffle that takes both
  // positions' taps from one 16-byte load, and per pair of taps the weights as one vector.
  int channels = 0;                   // 0: not prepared
  std::vector<std::int8_t> shuffles;  // 32 bytes per pair of positions
  std::vector<std::int16_t> vectors;  // 16 per pair of positions and pair of taps
};

// pillow-simd's precision for a pass whose heaviest weight is `heaviest`: the highest (at most
// PIL's 22 bits) at which that weight, rounded, stays below 2^15.
int fixed_precision(float heaviest);

// `n` positions' float weights (`weights`: `stride` apart, `count[i]` of them from input position
// first[i]) to fixed point at `precision` (that of the whole pass, of which these positions may
// be a part: a window of a resize is then the resize's values, cropped).
void quantize_taps(int n, const int* first, const int* count, const float* weights, int stride, int precision,
                   FixedTaps& out);

// Readies `taps` for rows of `c` channels in horizontal_fixed (the AVX2 kernel's tables, where it
// applies: 3 or 4 channels, each pair of adjacent positions' taps within 16 bytes).
void prepare_rows(FixedTaps& taps, int c);

// Bytes every output buffer must have writable past its n values: the vector kernels write whole
// vectors.
inline constexpr std::size_t kFixedSlack = 32;
// Bytes a row passed to horizontal_fixed must have readable (any values) past its last pixel.
std::size_t row_slack(const FixedTaps& taps, int c);

// One row of `c`-channel pixels resized: out[x * c + ch] = u8(sum over k of coef * in[(first[x] + k)
// * c + ch]) for x in [0, n), n the positions quantize_taps was given (prepare_rows first).
void horizontal_fixed(const std::uint8_t* in, int c, const FixedTaps& taps, std::uint8_t* out);

// One output row from the `count` rows position y reads: out[i] = u8(sum over k of coef[k] *
// rows[k][i]) for i in [0, n).
void vertical_fixed(const std::uint8_t* const* rows, const std::int16_t* coef, int count, int precision,
                    std::uint8_t* out, std::size_t n);

}  // namespace stoker::formats
