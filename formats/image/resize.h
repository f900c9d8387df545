// Antialiased bilinear resizing of HWC images, as PIL's Image.resize(BILINEAR) (and so
// torchvision's Resize/RandomResizedCrop on PIL images) defines it: a triangle filter whose support
// widens with the downscaling factor, applied separably (rows, then columns).
//   - u8 images in fixed point, as PIL resamples 8-bit images (formats/image/fixed_resample.h):
//     within 1 of PIL's values;
//   - f32 images in float (formats/image/float_resample.h): the same multiplications and additions
//     in the same order on every CPU, never fused, so the same values.
// The output may be written as planes (CHW) and mirrored, as to_chw and flip would make it, in the
// same pass. The coefficient tables and the sums are kept between calls: a warm Resizer does not
// allocate. Its memory (scratch_bytes()) is that of the output's rows, not the input's: the rows
// an output row reads (a ring as tall as the filter, 4 bytes a value for f32, 1 for u8) and one
// input row, or, where the filter is taller than the output (a strip shrunk a hundredfold), the
// output's sums (4 bytes a value), plus the tables, about 4 * (2 * (in/out) + 3) bytes per output
// row and column (more for the AVX2 kernels' copies).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/image/fixed_resample.h"
#include "stoker/export.h"

namespace stoker::formats {

class STOKER_TOOLS_API Resizer {
 public:
  // src: in_h rows of in_w pixels of c channels, `src_row` elements apart; dst: out_h x out_w x c,
  // contiguous.
  void run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
           int out_w);
  void run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w);
  // Rows [y, y + height) and columns [x, x + width) of an out_h x out_w resize (within it).
  struct Window {
    int y = 0, x = 0, height = 0, width = 0;
  };
  // Only `window` of the out_h x out_w resize, into dst (window.height x window.width x c,
  // contiguous): the values that resizing whole and cropping gives, value for value, at the cost
  // (sums, tables, memory) of the window; for u8, the fixed-point precision is the whole resize's,
  // found by scanning its weights one position at a time (about 10 ns a position, no memory).
  void run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
           int out_w, const Window& window);
  void run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w,
           const Window& window);
  // How the output is laid out: interleaved (HWC, the default) or as planes (CHW: channel ch's
  // value of pixel (y, x) at (ch * height + y) * width + x), and each row mirrored left to right.
  struct Layout {
    bool planar = false;
    bool mirrored = false;
  };
  void run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
           int out_w, const Window& window, Layout layout);
  void run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w,
           const Window& window, Layout layout);
  // The memory kept between calls (a test of the bound above).
  std::size_t scratch_bytes() const noexcept;

 private:
  struct Taps {
    std::vector<int> first;      // per output position: first input position
    std::vector<int> count;      // and how many
    std::vector<float> weights;  // count weights per position, `stride` apart
    int stride = 0;
  };
  // The taps of output positions [first_out, first_out + n) of an in -> out resize.
  static void compute(int in, int out, int first_out, int n, Taps& t);
  // The horizontal weights laid out two pixels to a vector for the AVX2 sums, or nullptr where
  // those are not used (no AVX2, other channel counts, many taps).
  const float* pair_weights(int c);
  static constexpr int kMostPairTaps = 9;
  // `window` of the full_h x full_w resize: u8 in fixed point (fixed_resample.h), f32 in float
  // (float_resample.h).
  void run_fixed(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int full_h,
                 int full_w, const Window& window, Layout layout);
  void run_float(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int full_h, int full_w,
                 const Window& window, Layout layout);
  // The heaviest weight of the in -> out pass, of which `taps` are positions [first_out, first_out + n).
  float heaviest(int in, int out, const Taps& taps, int first_out, int n);

  Taps horizontal_, vertical_;
  std::vector<float> one_position_;  // heaviest(): one position's weights at a time
  std::vector<float> acc_;           // every output row's sum: out_h x out_w x c (when taller taps than out_h)
  std::vector<float> ring_;          // or the last rows resized horizontally, as many as a row's taps
  std::vector<float> sum_;           // one output row's sums: out_w x c
  std::vector<std::uint8_t> bytes_;  // one u8 output row, before it is stored as `layout` says
  std::vector<float> pairs_;         // pair_weights()
  // The u8 resize: both passes' weights in fixed point, a row of input (with slack), the rows
  // resized horizontally (a ring, or one row when the sums over all rows are kept) and those sums.
  FixedTaps fixed_h_, fixed_v_;
  std::vector<std::uint8_t> line8_, ring8_;
  std::vector<std::int32_t> acc32_;
  std::vector<const float*> tap_rows_;          // the ring's rows an output row reads
  std::vector<const std::uint8_t*> tap_rows8_;  // the same, u8
  std::vector<float> row_;                      // one input row resized horizontally: out_w x c, + 1 float of slack
  std::vector<float> line_;                     // one input row, as floats, + 1 float of slack (0)
};

}  // namespace stoker::formats
