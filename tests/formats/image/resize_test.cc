// The resizer against plain transcriptions of its definitions: for f32 images, PIL's antialiased
// bilinear resize in float (the triangle filter's weights, normalised; rows, then columns; sums in
// tap order), the same numbers in the same order, so the same values; for u8 images, PIL's fixed
// point resampling with pillow-simd's 16-bit weights, the same bytes, and within 1 of the float
// definition rounded half up. Whatever vector code the resizer runs (each test runs the CPU's kernels and the portable
// ones); its output laid out as planes, mirrored, as the same values rearranged.
#include "formats/image/resize.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "formats/image/cpu_kernels.h"
#include "formats/image/planes.h"

namespace stoker::formats {
namespace {

struct Filter {
  std::vector<int> first, count;
  std::vector<std::vector<float>> weights;
};

Filter pil_bilinear(int in, int out) {
  Filter f;
  const double scale = static_cast<double>(in) / out, filter_scale = std::max(scale, 1.0), support = filter_scale;
  const int most = static_cast<int>(std::ceil(support)) * 2 + 1;
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int n = std::min(std::min(static_cast<int>(center + support + 0.5), in) - lo, most);
    std::vector<float> w(static_cast<std::size_t>(n));
    double total = 0;
    for (int k = 0; k < n; ++k) {
      const double tent = std::max(0.0, 1.0 - std::abs((lo + k - center + 0.5) / filter_scale));
      w[k] = static_cast<float>(tent);
      total += tent;
    }
    for (float& v : w) v = static_cast<float>(v / total);
    f.first.push_back(lo);
    f.count.push_back(n);
    f.weights.push_back(std::move(w));
  }
  return f;
}

template <class T>
std::vector<T> reference(const std::vector<T>& src, int in_h, int in_w, int c, int out_h, int out_w) {
  const Filter h = pil_bilinear(in_w, out_w), v = pil_bilinear(in_h, out_h);
  std::vector<float> rows(static_cast<std::size_t>(in_h) * out_w * c);
  for (int y = 0; y < in_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        float acc = 0;
        for (int k = 0; k < h.count[x]; ++k) {
          const std::size_t at = (static_cast<std::size_t>(y) * in_w + h.first[x] + k) * c + ch;
          acc += h.weights[x][k] * static_cast<float>(src[at]);
        }
        rows[(static_cast<std::size_t>(y) * out_w + x) * c + ch] = acc;
      }
    }
  }
  std::vector<T> out(static_cast<std::size_t>(out_h) * out_w * c);
  for (int y = 0; y < out_h; ++y) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(out_w) * c; ++i) {
      float acc = 0;
      for (int k = 0; k < v.count[y]; ++k) {
        acc += v.weights[y][k] * rows[static_cast<std::size_t>(v.first[y] + k) * out_w * c + i];
      }
      if constexpr (std::is_same_v<T, std::uint8_t>) {
        out[static_cast<std::size_t>(y) * out_w * c + i] =
            static_cast<std::uint8_t>(static_cast<std::int32_t>(std::clamp(acc, 0.0f, 255.0f) + 0.5f));
      } else {
        out[static_cast<std::size_t>(y) * out_w * c + i] = acc;
      }
    }
  }
  return out;
}

// Every test runs with the CPU's kernels (AVX2 where it has it) and with the portable ones.
class Resize : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { use_portable_kernels(GetParam()); }
  void TearDown() override { use_portable_kernels(false); }
};
INSTANTIATE_TEST_SUITE_P(Kernels, Resize, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Portable" : "Cpus"; });

// The u8 resize as PIL resamples 8-bit images, with pillow-simd's 16-bit weights: each pass's
// weights times 2^precision, rounded half up (precision the highest, at most 22, at which the
// heaviest rounds below 2^15); each pass's integer sums plus half, shifted back and clamped to u8,
// the rows' pass first.
std::vector<std::uint8_t> reference_fixed(const std::vector<std::uint8_t>& src, int in_h, int in_w, int c, int out_h,
                                          int out_w) {
  struct Fixed {
    std::vector<std::vector<std::int32_t>> coef;
    int precision = 0;
  };
  const auto quantize = [](const Filter& f) {
    float heaviest = 0;
    for (const auto& w : f.weights) {
      for (float v : w) heaviest = std::max(heaviest, v);
    }
    Fixed q;
    while (q.precision < 22 && std::lround(heaviest * std::ldexp(1.0, q.precision + 1)) < 32768) ++q.precision;
    for (const auto& w : f.weights) {
      std::vector<std::int32_t> ints;
      for (float v : w) ints.push_back(static_cast<std::int32_t>(0.5 + v * std::ldexp(1.0, q.precision)));
      q.coef.push_back(std::move(ints));
    }
    return q;
  };
  const auto to_u8 = [](std::int64_t sum, int precision) {
    return static_cast<std::uint8_t>(std::clamp<std::int64_t>(sum >> precision, 0, 255));
  };
  const Filter h = pil_bilinear(in_w, out_w), v = pil_bilinear(in_h, out_h);
  const Fixed fh = quantize(h), fv = quantize(v);
  std::vector<std::uint8_t> rows(static_cast<std::size_t>(in_h) * out_w * c);
  for (int y = 0; y < in_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      for (int ch = 0; ch < c; ++ch) {
        std::int64_t sum = std::int64_t{1} << (fh.precision - 1);
        for (int k = 0; k < h.count[x]; ++k) {
          sum += fh.coef[x][k] * src[(static_cast<std::size_t>(y) * in_w + h.first[x] + k) * c + ch];
        }
        rows[(static_cast<std::size_t>(y) * out_w + x) * c + ch] = to_u8(sum, fh.precision);
      }
    }
  }
  std::vector<std::uint8_t> out(static_cast<std::size_t>(out_h) * out_w * c);
  for (int y = 0; y < out_h; ++y) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(out_w) * c; ++i) {
      std::int64_t sum = std::int64_t{1} << (fv.precision - 1);
      for (int k = 0; k < v.count[y]; ++k)
        sum += fv.coef[y][k] * rows[static_cast<std::size_t>(v.first[y] + k) * out_w * c + i];
      out[static_cast<std::size_t>(y) * out_w * c + i] = to_u8(sum, fv.precision);
    }
  }
  return out;
}

struct Case {
  int in_h, in_w, out_h, out_w;
};
// Shrinking (many taps, the vector path's four pixels at a time and its tail), enlarging (2-3
// taps), widths that are not a multiple of four, one-pixel rows and columns; shrinking threefold
// (four pairs of taps: the general AVX2 kernel) and fourfold (pixels too far apart for one load:
// one value at a time).
const Case kCases[] = {{448, 448, 224, 224}, {300, 421, 224, 224}, {160, 200, 224, 224}, {37, 53, 19, 7},
                       {5, 3, 17, 23},       {1, 9, 1, 5},         {9, 1, 4, 1},         {64, 64, 63, 65},
                       {300, 300, 100, 100}, {120, 401, 30, 100}};

TEST_P(Resize, U8ImagesArePilsFixedPointResizeAndWithinOneOfItsFilterInFloat) {
  std::mt19937 rng(7);
  Resizer resizer;  // one resizer for every case: its kept buffers must not carry anything over
  for (int c : {1, 3, 4}) {
    for (const Case& k : kCases) {
      std::vector<std::uint8_t> src(static_cast<std::size_t>(k.in_h) * k.in_w * c);
      for (auto& b : src) b = static_cast<std::uint8_t>(rng());
      std::vector<std::uint8_t> got(static_cast<std::size_t>(k.out_h) * k.out_w * c);
      resizer.run(src.data(), k.in_h, k.in_w, c, static_cast<std::size_t>(k.in_w) * c, got.data(), k.out_h, k.out_w);
      EXPECT_EQ(got, reference_fixed(src, k.in_h, k.in_w, c, k.out_h, k.out_w))
          << k.in_h << "x" << k.in_w << "x" << c << " -> " << k.out_h << "x" << k.out_w;
      const auto exact = reference(src, k.in_h, k.in_w, c, k.out_h, k.out_w);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_LE(std::abs(got[i] - exact[i]), 1) << "value " << i << " of " << k.in_h << "x" << k.in_w << "x" << c;
      }
    }
  }
}

TEST_P(Resize, FloatImagesEqualPilsFilterComputedPlainly) {
  std::mt19937 rng(11);
  std::normal_distribution<float> value(0.0f, 3.0f);
  Resizer resizer;
  for (int c : {1, 3, 4}) {
    for (const Case& k : kCases) {
      std::vector<float> src(static_cast<std::size_t>(k.in_h) * k.in_w * c);
      for (auto& v : src) v = value(rng);
      std::vector<float> got(static_cast<std::size_t>(k.out_h) * k.out_w * c);
      resizer.run(src.data(), k.in_h, k.in_w, c, static_cast<std::size_t>(k.in_w) * c, got.data(), k.out_h, k.out_w);
      EXPECT_EQ(got, reference(src, k.in_h, k.in_w, c, k.out_h, k.out_w))
          << k.in_h << "x" << k.in_w << "x" << c << " -> " << k.out_h << "x" << k.out_w;
    }
  }
}

TEST_P(Resize, ReadsOnlyTheRowsOfItsRegionInALargerImage) {
  // A region of a wider image (src_row larger than the region's row): the pixels beside it are
  // never read, so changing them changes nothing.
  const int h = 30, w = 40, c = 3, stride_px = 57;
  std::vector<std::uint8_t> image(static_cast<std::size_t>(h) * stride_px * c);
  std::vector<std::uint8_t> region(static_cast<std::size_t>(h) * w * c);
  std::mt19937 rng(3);
  for (auto& b : image) b = static_cast<std::uint8_t>(rng());
  for (int y = 0; y < h; ++y) {
    const std::size_t row = static_cast<std::size_t>(y);
    std::copy_n(&image[row * stride_px * c], w * c, &region[row * w * c]);
  }
  std::vector<std::uint8_t> got(16 * 24 * c);
  Resizer resizer;
  resizer.run(image.data(), h, w, c, static_cast<std::size_t>(stride_px) * c, got.data(), 16, 24);
  EXPECT_EQ(got, reference_fixed(region, h, w, c, 16, 24));
}

TEST_P(Resize, AWindowIsTheWholeResizeCroppedValueForValue) {
  std::mt19937 rng(5);
  Resizer whole, part;
  struct Window {
    int in_h, in_w, out_h, out_w;
    Resizer::Window window;
  };
  // Shrinking and enlarging; windows at the edges, in the middle, one pixel, the whole.
  const Window cases[] = {{300, 421, 224, 298, {0, 37, 224, 224}}, {421, 300, 298, 224, {37, 0, 224, 224}},
                          {40, 60, 100, 150, {13, 7, 80, 131}},    {37, 53, 19, 7, {18, 6, 1, 1}},
                          {64, 64, 63, 65, {0, 0, 63, 65}},        {9, 1, 4, 1, {1, 0, 2, 1}},
                          {120, 90, 256, 192, {16, 0, 224, 192}}};
  for (int c : {1, 3, 4}) {
    for (const Window& k : cases) {
      std::vector<std::uint8_t> src(static_cast<std::size_t>(k.in_h) * k.in_w * c);
      for (auto& b : src) b = static_cast<std::uint8_t>(rng());
      std::vector<float> fsrc(src.begin(), src.end());
      const std::size_t row = static_cast<std::size_t>(k.in_w) * c;
      std::vector<std::uint8_t> full(static_cast<std::size_t>(k.out_h) * k.out_w * c);
      std::vector<float> ffull(full.size());
      whole.run(src.data(), k.in_h, k.in_w, c, row, full.data(), k.out_h, k.out_w);
      whole.run(fsrc.data(), k.in_h, k.in_w, c, row, ffull.data(), k.out_h, k.out_w);
      const Resizer::Window& win = k.window;
      std::vector<std::uint8_t> got(static_cast<std::size_t>(win.height) * win.width * c), want;
      std::vector<float> fgot(got.size()), fwant;
      part.run(src.data(), k.in_h, k.in_w, c, row, got.data(), k.out_h, k.out_w, win);
      part.run(fsrc.data(), k.in_h, k.in_w, c, row, fgot.data(), k.out_h, k.out_w, win);
      for (int y = win.y; y < win.y + win.height; ++y) {
        const std::size_t from = (static_cast<std::size_t>(y) * k.out_w + win.x) * c;
        want.insert(want.end(), full.begin() + from, full.begin() + from + static_cast<std::size_t>(win.width) * c);
        fwant.insert(fwant.end(), ffull.begin() + from, ffull.begin() + from + static_cast<std::size_t>(win.width) * c);
      }
      EXPECT_EQ(got, want) << k.in_h << "x" << k.in_w << "x" << c << " -> " << k.out_h << "x" << k.out_w;
      EXPECT_EQ(fgot, fwant) << k.in_h << "x" << k.in_w << "x" << c << " -> " << k.out_h << "x" << k.out_w;
    }
  }
}

TEST_P(Resize, PlanesAndMirroredRowsAreTheInterleavedOutputRearranged) {
  std::mt19937 rng(13);
  Resizer plain, laid_out;
  const Case cases[] = {{300, 421, 224, 224}, {160, 200, 224, 96}, {37, 53, 19, 7}, {5, 3, 17, 23}, {1, 9, 1, 5}};
  for (int c : {1, 3, 4}) {
    for (const Case& k : cases) {
      std::vector<std::uint8_t> src(static_cast<std::size_t>(k.in_h) * k.in_w * c);
      for (auto& b : src) b = static_cast<std::uint8_t>(rng());
      std::vector<float> fsrc(src.begin(), src.end());
      const std::size_t row = static_cast<std::size_t>(k.in_w) * c, n = static_cast<std::size_t>(k.out_h) * k.out_w * c;
      std::vector<std::uint8_t> hwc(n);
      std::vector<float> fhwc(n);
      plain.run(src.data(), k.in_h, k.in_w, c, row, hwc.data(), k.out_h, k.out_w);
      plain.run(fsrc.data(), k.in_h, k.in_w, c, row, fhwc.data(), k.out_h, k.out_w);
      for (bool planar : {false, true}) {
        for (bool mirrored : {false, true}) {
          std::vector<std::uint8_t> got(n), want(n);
          std::vector<float> fgot(n), fwant(n);
          const Resizer::Window whole{0, 0, k.out_h, k.out_w};
          laid_out.run(src.data(), k.in_h, k.in_w, c, row, got.data(), k.out_h, k.out_w, whole, {planar, mirrored});
          laid_out.run(fsrc.data(), k.in_h, k.in_w, c, row, fgot.data(), k.out_h, k.out_w, whole, {planar, mirrored});
          for (int y = 0; y < k.out_h; ++y) {
            for (int x = 0; x < k.out_w; ++x) {
              const int to = mirrored ? k.out_w - 1 - x : x;
              for (int ch = 0; ch < c; ++ch) {
                const std::size_t from = (static_cast<std::size_t>(y) * k.out_w + x) * c + ch;
                const std::size_t at = planar ? (static_cast<std::size_t>(ch) * k.out_h + y) * k.out_w + to
                                              : (static_cast<std::size_t>(y) * k.out_w + to) * c + ch;
                want[at] = hwc[from];
                fwant[at] = fhwc[from];
              }
            }
          }
          EXPECT_EQ(got, want) << k.in_h << "x" << k.in_w << "x" << c << " planar " << planar << " mirrored "
                               << mirrored;
          EXPECT_EQ(fgot, fwant) << k.in_h << "x" << k.in_w << "x" << c << " planar " << planar << " mirrored "
                                 << mirrored;
        }
      }
    }
  }
}

TEST_P(Resize, ARowSplitIntoPlanesPutsEachValueInItsPlaneAtItsPlaceOrMirrored) {
  std::mt19937 rng(17);
  for (int c : {1, 2, 3, 4}) {
    for (int w : {0, 1, 15, 16, 17, 31, 32, 33, 50, 224}) {
      std::vector<std::uint8_t> hwc(static_cast<std::size_t>(w) * c);
      for (auto& b : hwc) b = static_cast<std::uint8_t>(rng());
      for (bool mirrored : {false, true}) {
        // Planes with a guard byte on each side, which must stay as they are.
        std::vector<std::vector<std::uint8_t>> planes(static_cast<std::size_t>(c),
                                                      std::vector<std::uint8_t>(static_cast<std::size_t>(w) + 2, 0xA5));
        std::uint8_t* at[4];
        for (int ch = 0; ch < c; ++ch) at[ch] = planes[static_cast<std::size_t>(ch)].data() + 1;
        row_to_planes(hwc.data(), w, c, at, mirrored);
        for (int ch = 0; ch < c; ++ch) {
          const auto& plane = planes[static_cast<std::size_t>(ch)];
          ASSERT_EQ(plane.front(), 0xA5);
          ASSERT_EQ(plane.back(), 0xA5);
          for (int x = 0; x < w; ++x) {
            const int to = mirrored ? w - 1 - x : x;
            ASSERT_EQ(plane[static_cast<std::size_t>(to) + 1], hwc[static_cast<std::size_t>(x) * c + ch])
                << "width " << w << " channels " << c << " mirrored " << mirrored << " x " << x;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace stoker::formats
