#include "formats/image/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/scratch.h"
#include "formats/image/cpu_kernels.h"
#include "formats/image/float_resample.h"
#include "formats/image/planes.h"

namespace stoker::formats {

using detail::fit_scratch;

namespace {

// PIL's bilinear filter for an in -> out pass.
struct Filter {
  double scale, filter_scale, support;
  int stride;  // the most taps a position has
};
Filter filter_of(int in, int out) {
  Filter f;
  f.scale = static_cast<double>(in) / out;
  f.filter_scale = std::max(f.scale, 1.0);
  f.support = 1.0 * f.filter_scale;  // the bilinear (triangle) filter's support is 1
  f.stride = static_cast<int>(std::ceil(f.support)) * 2 + 1;
  return f;
}

// Output position i's taps: its weights into w (f.stride floats; those past its count are not
// written), its first input position into `first` and their count into `count`.
void position_taps(const Filter& f, int in, int i, float* w, int& first, int& count) {
  const double center = (i + 0.5) * f.scale;
  // PIL's own rounding, truncation toward zero of x + 0.5 (also below zero), which the filter
  // must reproduce byte for byte: not lround.
  const int lo = std::max(static_cast<int>(center - f.support + 0.5), 0);   // NOLINT(bugprone-incorrect-roundings)
  const int hi = std::min(static_cast<int>(center + f.support + 0.5), in);  // NOLINT(bugprone-incorrect-roundings)
  const int n = std::min(hi - lo, f.stride);
  double total = 0;
  for (int k = 0; k < n; ++k) {
    const double x = (lo + k - center + 0.5) / f.filter_scale;
    const double v = std::max(0.0, 1.0 - std::abs(x));
    w[k] = static_cast<float>(v);
    total += v;
  }
  if (total > 0) {
    for (int k = 0; k < n; ++k) w[k] = static_cast<float>(w[k] / total);
  }
  first = lo;
  count = n;
}

// Output row y (out_w pixels of c values, interleaved) into dst as `layout` says: planes split
// sixteen pixels at a time for u8 (row_to_planes), else value by value; a plain row copied.
template <class T>
void store_row(const T* row, T* dst, int y, int out_h, int out_w, int c, Resizer::Layout layout) {
  const std::size_t out_row = static_cast<std::size_t>(out_w) * c;
  if (!layout.planar && !layout.mirrored) {
    std::copy(row, row + out_row, dst + static_cast<std::size_t>(y) * out_row);
    return;
  }
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    if (layout.planar && c <= 4) {
      std::uint8_t* planes[4];
      for (int ch = 0; ch < c; ++ch) {
        planes[ch] = dst + (static_cast<std::size_t>(ch) * out_h + y) * static_cast<std::size_t>(out_w);
      }
      return row_to_planes(row, out_w, c, planes, layout.mirrored);
    }
  }
  for (int x = 0; x < out_w; ++x) {
    const int to = layout.mirrored ? out_w - 1 - x : x;
    for (int ch = 0; ch < c; ++ch) {
      const std::size_t at = layout.planar
                                 ? (static_cast<std::size_t>(ch) * out_h + y) * static_cast<std::size_t>(out_w) + to
                                 : static_cast<std::size_t>(y) * out_row + static_cast<std::size_t>(to) * c + ch;
      dst[at] = row[static_cast<std::size_t>(x) * c + ch];
    }
  }
}

// The columns' pass over rows the rows' pass made, kept in a ring of `taps` rows of `row_len`
// values, `taps` at least every output row's count: each output row is summed once, from its rows,
// by sum_row(y, rows, count). Its first row never decreases with y, so once row y's rows are in
// the ring, the rows before them are read by no later output row. resize_row(r, out) makes input
// row r's.
template <class Row, class ResizeRow, class SumRow>
void through_ring(const int* first, const int* count, int out_h, int taps, std::size_t row_len, std::vector<Row>& ring,
                  std::vector<const Row*>& rows, ResizeRow resize_row, SumRow sum_row) {
  fit_scratch(ring, static_cast<std::size_t>(taps) * row_len);
  fit_scratch(rows, static_cast<std::size_t>(taps));
  int next = 0;  // the next input row to resize
  for (int y = 0; y < out_h; ++y) {
    next = std::max(next, first[y]);
    for (; next < first[y] + count[y]; ++next) resize_row(next, &ring[static_cast<std::size_t>(next % taps) * row_len]);
    for (int k = 0; k < count[y]; ++k) rows[k] = &ring[static_cast<std::size_t>((first[y] + k) % taps) * row_len];
    sum_row(y, rows.data(), count[y]);
  }
}

// The columns' pass where the filter is taller than the output (a strip shrunk a hundredfold):
// each input row is made once (resize_row(r), returning it) and added to every output row that
// reads it, add(y, k, row) for its tap k, in increasing r: so memory is the output's sums and one
// input row, however tall the input. Output rows before `open` have had all their input rows. Both
// ends of the rows' windows grow with y (their centres do, and every window has the filter's width
// or is cut by the image's edge), so the rows that read input row r are `open` onwards, while
// their window starts by r.
template <class ResizeRow, class Add>
void over_every_row(const int* first, const int* count, int in_h, int out_h, ResizeRow resize_row, Add add) {
  int open = 0;
  for (int r = first[0]; r < in_h && open < out_h; ++r) {
    while (open < out_h && first[open] + count[open] <= r) ++open;
    if (open == out_h || first[open] > r) continue;  // a row no output reads
    const auto* row = resize_row(r);
    for (int y = open; y < out_h && first[y] <= r; ++y) {
      if (r - first[y] < count[y]) add(y, r - first[y], row);
    }
  }
}

}  // namespace

void Resizer::compute(int in, int out, int first_out, int n_out, Taps& t) {
  const Filter f = filter_of(in, out);
  t.stride = f.stride;
  fit_scratch(t.first, static_cast<std::size_t>(n_out));
  fit_scratch(t.count, static_cast<std::size_t>(n_out));
  fit_scratch(t.weights, static_cast<std::size_t>(n_out) * t.stride);
  std::fill(t.weights.begin(), t.weights.end(), 0.0f);
  for (int i = 0; i < n_out; ++i) {
    position_taps(f, in, first_out + i, &t.weights[static_cast<std::size_t>(i) * t.stride],
                  t.first[static_cast<std::size_t>(i)], t.count[static_cast<std::size_t>(i)]);
  }
}

const float* Resizer::pair_weights(int c) {
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
  return nullptr;
}

float Resizer::heaviest(int in, int out, const Taps& taps, int first_out, int n) {
  const auto most = [](const float* w, int count) { return count > 0 ? *std::max_element(w, w + count) : 0.0f; };
  float heaviest = 0;
  for (std::size_t i = 0; i < taps.count.size(); ++i) {
    heaviest = std::max(heaviest, most(&taps.weights[i * static_cast<std::size_t>(taps.stride)], taps.count[i]));
  }
  // The precision is the whole pass's, so that a window's values are the whole resize's: where the
  // window is a part of the pass, the other positions' weights are computed too, one at a time
  // (their time, about 10 ns a position, not their memory).
  if (first_out != 0 || n != out) {
    const Filter f = filter_of(in, out);
    fit_scratch(one_position_, static_cast<std::size_t>(f.stride));
    for (int i = 0; i < out; ++i) {
      if (i == first_out) i += n;  // the window's, already counted
      if (i >= out) break;
      int first = 0, count = 0;
      position_taps(f, in, i, one_position_.data(), first, count);
      heaviest = std::max(heaviest, most(one_position_.data(), count));
    }
  }
  return heaviest;
}

void Resizer::run_fixed(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst,
                        int full_h, int full_w, const Window& window, Layout layout) {
  if (window.height <= 0 || window.width <= 0) return;
  // From here on the output is the window: its taps are those of the window's rows and columns in
  // the full resize, at the full resize's precision.
  compute(in_w, full_w, window.x, window.width, horizontal_);
  compute(in_h, full_h, window.y, window.height, vertical_);
  const int out_h = window.height, out_w = window.width;
  quantize_taps(out_w, horizontal_.first.data(), horizontal_.count.data(), horizontal_.weights.data(),
                horizontal_.stride, fixed_precision(heaviest(in_w, full_w, horizontal_, window.x, out_w)), fixed_h_);
  quantize_taps(out_h, vertical_.first.data(), vertical_.count.data(), vertical_.weights.data(), vertical_.stride,
                fixed_precision(heaviest(in_h, full_h, vertical_, window.y, out_h)), fixed_v_);
  prepare_rows(fixed_h_, c);
  const std::size_t out_row = static_cast<std::size_t>(out_w) * c, in_row = static_cast<std::size_t>(in_w) * c;
  const std::size_t row_bytes = out_row + kFixedSlack;  // a horizontally resized row and its slack
  // The row's columns the taps read, copied beside a slack of zeros that the vector kernels may
  // read (weighted by zero) past the row's end.
  fit_scratch(line8_, in_row + row_slack(fixed_h_, c));
  std::fill(line8_.begin() + static_cast<std::ptrdiff_t>(in_row), line8_.end(), std::uint8_t{0});
  const std::size_t cols_from = static_cast<std::size_t>(horizontal_.first.front()) * c;
  const std::size_t cols_to = static_cast<std::size_t>(horizontal_.first.back() + horizontal_.count.back()) * c;
  const auto resize_row = [&](int r, std::uint8_t* out) {
    std::memcpy(line8_.data() + cols_from, src + static_cast<std::size_t>(r) * src_row + cols_from,
                cols_to - cols_from);
    horizontal_fixed(line8_.data(), c, fixed_h_, out);
  };
  fit_scratch(bytes_, row_bytes);
  const std::size_t per = 2 * static_cast<std::size_t>(fixed_v_.most_pairs);
  const int* first = vertical_.first.data();
  const int* count = vertical_.count.data();
  const int taps = std::max(*std::max_element(count, count + out_h), 1);
  if (taps <= out_h) {
    through_ring(first, count, out_h, taps, row_bytes, ring8_, tap_rows8_, resize_row,
                 [&](int y, const std::uint8_t* const* rows, int n) {
                   vertical_fixed(rows, &fixed_v_.coef[static_cast<std::size_t>(y) * per], n, fixed_v_.precision,
                                  bytes_.data(), out_row);
                   store_row(bytes_.data(), dst, y, out_h, out_w, c, layout);
                 });
    return;
  }
  // Integer sums are exact in any order: the same bytes as the ring's.
  fit_scratch(ring8_, row_bytes);
  fit_scratch(acc32_, static_cast<std::size_t>(out_h) * out_row);
  std::fill(acc32_.begin(), acc32_.end(), std::int32_t{1} << (fixed_v_.precision - 1));
  over_every_row(
      first, count, in_h, out_h,
      [&](int r) {
        resize_row(r, ring8_.data());
        return static_cast<const std::uint8_t*>(ring8_.data());
      },
      [&](int y, int k, const std::uint8_t* __restrict row) {
        const std::int32_t wk = fixed_v_.coef[static_cast<std::size_t>(y) * per + static_cast<std::size_t>(k)];
        std::int32_t* __restrict acc = &acc32_[static_cast<std::size_t>(y) * out_row];
        for (std::size_t i = 0; i < out_row; ++i) acc[i] += wk * row[i];
      });
  for (int y = 0; y < out_h; ++y) {
    const std::int32_t* acc = &acc32_[static_cast<std::size_t>(y) * out_row];
    for (std::size_t i = 0; i < out_row; ++i) {
      const std::int32_t v = acc[i] >> fixed_v_.precision;
      bytes_[i] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    store_row(bytes_.data(), dst, y, out_h, out_w, c, layout);
  }
}

void Resizer::run_float(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int full_h,
                        int full_w, const Window& window, Layout layout) {
  if (window.height <= 0 || window.width <= 0) return;
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
  // Input row r, resized horizontally, into `out` (out_row floats + 1 of slack). The floats beside
  // the columns read keep what an earlier row left there: the vector code may load one past a
  // pixel, into a lane it then drops.
  const auto resize_row = [&](int r, float* out) {
    std::copy(src + static_cast<std::size_t>(r) * src_row + cols_from,
              src + static_cast<std::size_t>(r) * src_row + cols_to, line_.data() + cols_from);
    horizontal_row(line_.data(), out, out_w, c, horizontal_.first.data(), horizontal_.count.data(),
                   horizontal_.weights.data(), pairs, horizontal_.stride);
  };
  const int* first = vertical_.first.data();
  const int* count = vertical_.count.data();
  const int taps = std::max(*std::max_element(count, count + out_h), 1);
  if (taps <= out_h) {
    through_ring(first, count, out_h, taps, out_row + 1, ring_, tap_rows_, resize_row,
                 [&](int y, const float* const* rows, int n) {
                   vertical_row(rows, &vertical_.weights[static_cast<std::size_t>(y) * vertical_.stride], n,
                                sum_.data(), out_row);
                   store_row(sum_.data(), dst, y, out_h, out_w, c, layout);
                 });
    return;
  }
  // Output row y adds input rows first[y] .. first[y] + count[y] - 1 in increasing order, the order
  // of the ring's sums: the same results, float for float. A 1 x 10^6 strip resized to 224 x 224
  // needs 600 KB of sums here, not the 2.7 GB that keeping every resized row would take.
  fit_scratch(acc_, static_cast<std::size_t>(out_h) * out_row);
  std::fill(acc_.begin(), acc_.end(), 0.0f);
  over_every_row(
      first, count, in_h, out_h,
      [&](int r) {
        resize_row(r, row_.data());
        return static_cast<const float*>(row_.data());
      },
      [&](int y, int k, const float* __restrict row) {
        const float wk =
            vertical_.weights[static_cast<std::size_t>(y) * vertical_.stride + static_cast<std::size_t>(k)];
        // Over contiguous memory, so that it vectorises.
        float* __restrict acc = &acc_[static_cast<std::size_t>(y) * out_row];
        for (std::size_t i = 0; i < out_row; ++i) acc[i] += wk * row[i];
      });
  for (int y = 0; y < out_h; ++y)
    store_row(&acc_[static_cast<std::size_t>(y) * out_row], dst, y, out_h, out_w, c, layout);
}

std::size_t Resizer::scratch_bytes() const noexcept {
  const auto taps = [](const Taps& t) {
    return t.first.capacity() * sizeof(int) + t.count.capacity() * sizeof(int) + t.weights.capacity() * sizeof(float);
  };
  const auto fixed = [](const FixedTaps& t) {
    return (t.first.capacity() + t.pairs.capacity()) * sizeof(int) +
           (t.coef.capacity() + t.vectors.capacity()) * sizeof(std::int16_t) + t.shuffles.capacity();
  };
  return taps(horizontal_) + taps(vertical_) + fixed(fixed_h_) + fixed(fixed_v_) +
         (acc_.capacity() + ring_.capacity() + sum_.capacity() + row_.capacity() + line_.capacity() +
          pairs_.capacity() + one_position_.capacity()) *
             sizeof(float) +
         bytes_.capacity() + line8_.capacity() + ring8_.capacity() + acc32_.capacity() * sizeof(std::int32_t) +
         (tap_rows_.capacity() + tap_rows8_.capacity()) * sizeof(void*);
}

void Resizer::run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
                  int out_w) {
  run_fixed(src, in_h, in_w, c, src_row, dst, out_h, out_w, Window{0, 0, out_h, out_w}, Layout{});
}

void Resizer::run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w) {
  run_float(src, in_h, in_w, c, src_row, dst, out_h, out_w, Window{0, 0, out_h, out_w}, Layout{});
}

void Resizer::run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
                  int out_w, const Window& window) {
  run_fixed(src, in_h, in_w, c, src_row, dst, out_h, out_w, window, Layout{});
}

void Resizer::run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w,
                  const Window& window) {
  run_float(src, in_h, in_w, c, src_row, dst, out_h, out_w, window, Layout{});
}

void Resizer::run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
                  int out_w, const Window& window, Layout layout) {
  run_fixed(src, in_h, in_w, c, src_row, dst, out_h, out_w, window, layout);
}

void Resizer::run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w,
                  const Window& window, Layout layout) {
  run_float(src, in_h, in_w, c, src_row, dst, out_h, out_w, window, layout);
}

}  // namespace stoker::formats
