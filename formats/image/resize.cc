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

#if defined(__x86_64__) && defined(__GNUC__)
#define STOKER_X86_DISPATCH 1
#endif

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

void Resizer::store(const std::uint8_t* row, std::uint8_t* dst, int y, int out_h, int out_w, int c, Layout layout) {
  const std::size_t out_row = static_cast<std::size_t>(out_w) * c;
  if (layout.planar && c <= 4) {
    std::uint8_t* planes[4];
    for (int ch = 0; ch < c; ++ch) {
      planes[ch] = dst + (static_cast<std::size_t>(ch) * out_h + y) * static_cast<std::size_t>(out_w);
    }
    return row_to_planes(row, out_w, c, planes, layout.mirrored);
  }
  if (!layout.planar && !layout.mirrored) {
    std::memcpy(dst + static_cast<std::size_t>(y) * out_row, row, out_row);
    return;
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
  const int taps = std::max(*std::max_element(vertical_.count.begin(), vertical_.count.end()), 1);
  if (taps <= out_h) {
    // As the float resize's ring (run_impl).
    fit_scratch(ring8_, static_cast<std::size_t>(taps) * row_bytes);
    fit_scratch(tap_rows8_, static_cast<std::size_t>(taps));
    const std::uint8_t** tap_rows = tap_rows8_.data();
    int next = 0;
    for (int y = 0; y < out_h; ++y) {
      const int first = vertical_.first[static_cast<std::size_t>(y)],
                count = vertical_.count[static_cast<std::size_t>(y)];
      next = std::max(next, first);
      for (; next < first + count; ++next) resize_row(next, &ring8_[static_cast<std::size_t>(next % taps) * row_bytes]);
      for (int k = 0; k < count; ++k) tap_rows[k] = &ring8_[static_cast<std::size_t>((first + k) % taps) * row_bytes];
      vertical_fixed(tap_rows, &fixed_v_.coef[static_cast<std::size_t>(y) * per], count, fixed_v_.precision,
                     bytes_.data(), out_row);
      store(bytes_.data(), dst, y, out_h, out_w, c, layout);
    }
    return;
  }
  // Taps taller than the output: the sums over all rows, one input row at a time (as run_impl).
  // Integer sums are exact in any order: the same bytes as the ring's.
  fit_scratch(ring8_, row_bytes);
  fit_scratch(acc32_, static_cast<std::size_t>(out_h) * out_row);
  std::fill(acc32_.begin(), acc32_.end(), std::int32_t{1} << (fixed_v_.precision - 1));
  int open = 0;
  for (int r = vertical_.first.front(); r < in_h && open < out_h; ++r) {
    while (open < out_h && vertical_.first[open] + vertical_.count[open] <= r) ++open;
    if (open == out_h || vertical_.first[open] > r) continue;  // a row no output reads
    resize_row(r, ring8_.data());
    const std::uint8_t* __restrict resized = ring8_.data();
    for (int y = open; y < out_h && vertical_.first[y] <= r; ++y) {
      const int k = r - vertical_.first[y];
      if (k >= vertical_.count[y]) continue;
      const std::int32_t wk = fixed_v_.coef[static_cast<std::size_t>(y) * per + k];
      std::int32_t* __restrict acc = &acc32_[static_cast<std::size_t>(y) * out_row];
      for (std::size_t i = 0; i < out_row; ++i) acc[i] += wk * resized[i];
    }
  }
  for (int y = 0; y < out_h; ++y) {
    const std::int32_t* acc = &acc32_[static_cast<std::size_t>(y) * out_row];
    for (std::size_t i = 0; i < out_row; ++i) {
      const std::int32_t v = acc[i] >> fixed_v_.precision;
      bytes_[i] = static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    store(bytes_.data(), dst, y, out_h, out_w, c, layout);
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
  if constexpr (std::is_same_v<T, std::uint8_t>) {
    return run_fixed(src, in_h, in_w, c, src_row, dst, full_h, full_w, window, layout);
  }
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
    fit_scratch(tap_rows_, static_cast<std::size_t>(taps));
    const float** tap_rows = tap_rows_.data();
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
