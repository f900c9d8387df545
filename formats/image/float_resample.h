// The f32 resize's kernels (formats/image/resize.h): each pass's sums in float, the same
// multiplications and additions in the same order on every CPU (SSE2, or AVX2 where the CPU has it,
// never fused), so the same values.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::formats {

// One row of `c`-channel pixels resized: out[x * c + ch] = sum over k of w[x][k] * in[(first[x] + k)
// * c + ch], k in increasing order, for x in [0, out_w) (`weights`: `stride` apart). `in` and
// `out` have one float of slack past their ends (3 channels are read and written four floats at a
// time). `pairs`: for 3 or 4 channels with AVX2, the weights two pixels to a vector, one vector
// per tap (pixel 2j's in lanes 0-3, 2j + 1's in lanes 4-7); nullptr for none.
void horizontal_row(const float* in, float* out, int out_w, int c, const int* first, const int* count,
                    const float* weights, const float* pairs, int stride);

// One output row from the `count` rows its taps read: out[i] = sum over k of w[k] * rows[k][i], k
// in increasing order from 0.0f, for i in [0, n).
void vertical_row(const float* const* rows, const float* w, int count, float* out, std::size_t n);

}  // namespace stoker::formats
