// Antialiased bilinear resizing of HWC images, as PIL's Image.resize(BILINEAR) (and so
// torchvision's Resize/RandomResizedCrop on PIL images) defines it: a triangle filter whose support
// widens with the downscaling factor, applied separably (rows, then columns). Accumulates in float;
// u8 output is rounded to nearest. The coefficient tables and the intermediate rows are kept between
// calls: a warm Resizer does not allocate.
#pragma once

#include <cstdint>
#include <vector>

namespace stoker::detail {

class Resizer {
 public:
  // src: in_h rows of in_w pixels of c channels, `src_row` elements apart; dst: out_h x out_w x c,
  // contiguous.
  void run(const std::uint8_t* src, int in_h, int in_w, int c, std::size_t src_row, std::uint8_t* dst, int out_h,
           int out_w);
  void run(const float* src, int in_h, int in_w, int c, std::size_t src_row, float* dst, int out_h, int out_w);

 private:
  struct Taps {
    std::vector<int> first;      // per output position: first input position
    std::vector<int> count;      // and how many
    std::vector<float> weights;  // count weights per position, `stride` apart
    int stride = 0;
  };
  static void compute(int in, int out, Taps& t);
  template <class T>
  void run_impl(const T* src, int in_h, int in_w, int c, std::size_t src_row, T* dst, int out_h, int out_w);

  Taps horizontal_, vertical_;
  std::vector<float> rows_;  // the horizontally resized rows: in_h x out_w x c, + 1 float of slack
  std::vector<float> acc_;   // one output row
  std::vector<float> line_;  // one input row, as floats, + 1 float of slack (0)
};

}  // namespace stoker::detail
