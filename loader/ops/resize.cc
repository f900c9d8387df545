#include "loader/ops/resize.h"

#include <algorithm>
#include <cmath>

namespace stoker::detail {

void Resizer::compute(int in, int out, Taps& t) {
  const double scale = static_cast<double>(in) / out;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;  // the bilinear (triangle) filter's support is 1
  t.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<std::size_t>(out));
  t.count.resize(static_cast<std::size_t>(out));
  t.weights.assign(static_cast<std::size_t>(out) * t.stride, 0.0f);
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in);
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

inline std::uint8_t store(float v, std::uint8_t*) { return static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }
inline float store(float v, float*) { return v; }

}  // namespace

template <class T>
void Resizer::run_impl(const T* src, int in_h, int in_w, int c, std::size_t src_row, T* dst, int out_h, int out_w) {
  compute(in_w, out_w, horizontal_);
  compute(in_h, out_h, vertical_);
  // Only the input rows some output row reads.
  const int row_lo = vertical_.first.front();
  const int row_hi = vertical_.first.back() + vertical_.count.back();
  const std::size_t out_row = static_cast<std::size_t>(out_w) * c;
  rows_.resize(static_cast<std::size_t>(row_hi - row_lo) * out_row);
  acc_.resize(out_row);
  for (int y = row_lo; y < row_hi; ++y) {
    const T* in = src + static_cast<std::size_t>(y) * src_row;
    float* o = &rows_[static_cast<std::size_t>(y - row_lo) * out_row];
    for (int x = 0; x < out_w; ++x) {
      const float* w = &horizontal_.weights[static_cast<std::size_t>(x) * horizontal_.stride];
      const T* p = in + static_cast<std::size_t>(horizontal_.first[x]) * c;
      const int n = horizontal_.count[x];
      for (int ch = 0; ch < c; ++ch) {
        float acc = 0;
        for (int k = 0; k < n; ++k) acc += w[k] * static_cast<float>(p[k * c + ch]);
        o[x * c + ch] = acc;
      }
    }
  }
  for (int y = 0; y < out_h; ++y) {
    const float* w = &vertical_.weights[static_cast<std::size_t>(y) * vertical_.stride];
    const int n = vertical_.count[y];
    const float* base = &rows_[static_cast<std::size_t>(vertical_.first[y] - row_lo) * out_row];
    T* o = dst + static_cast<std::size_t>(y) * out_row;
    // Row by row, so that the inner loop runs over contiguous memory and vectorises.
    std::fill(acc_.begin(), acc_.end(), 0.0f);
    for (int k = 0; k < n; ++k) {
      const float wk = w[k];
      const float* r = base + static_cast<std::size_t>(k) * out_row;
      for (std::size_t i = 0; i < out_row; ++i) acc_[i] += wk * r[i];
    }
    for (std::size_t i = 0; i < out_row; ++i) o[i] = store(acc_[i], o);
  }
}

void Resizer::run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst,
                  int out_h, int out_w) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w);
}

void Resizer::run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w) {
  run_impl(src, in_h, in_w, c, src_row, dst, out_h, out_w);
}

}  // namespace stoker::detail
