#include "loader/pipeline/ops/color_adjust.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace stoker::detail {
namespace {

// torch turns a Python float into the float32 of the computation by rounding the double: so do we
// (a float literal would round the decimal once, sometimes to the other neighbour).
float f32(double v) { return static_cast<float>(v); }

// float32 -> uint8 as torch converts after clamping to [0, 255]: truncation.
std::uint8_t to_u8(float v) {
  v = v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v;
  return static_cast<std::uint8_t>(static_cast<int>(v));
}

// x * ratio in float32 for every u8 x: `image.mul(ratio)`.
std::array<float, 256> scaled(double ratio) {
  std::array<float, 256> t{};
  const float r = f32(ratio);
  for (int x = 0; x < 256; ++x) t[static_cast<std::size_t>(x)] = static_cast<float>(x) * r;
  return t;
}

// torchvision's _blend(image, other, ratio) on u8: image.mul(ratio).add_(other, alpha=1 - ratio),
// clamped and truncated. torch's vector code adds with one fused multiply-add, other * alpha + p
// rounded once; `other_alpha` is other * alpha in double and the sum is made there, then rounded
// to float: the same single rounding, since a float times a float and the sum with a float below
// 2^9 fit in a double's 53 bits (a product of a float mean and a tiny alpha aside).
std::uint8_t blend(float image_ratio, double other_alpha) {
  return to_u8(static_cast<float>(other_alpha + static_cast<double>(image_ratio)));
}

// The pixels are worked on in chunks of kChunk, each split into three planes of floats first, so
// that the per-value loops below are plain arithmetic over arrays, which the compiler vectorises.
constexpr std::size_t kChunk = 256;

struct Planes {
  float r[kChunk], g[kChunk], b[kChunk];
  // n <= kChunk RGB pixels at px.
  void load(const std::uint8_t* __restrict px, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      r[i] = static_cast<float>(px[i * 3]);
      g[i] = static_cast<float>(px[i * 3 + 1]);
      b[i] = static_cast<float>(px[i * 3 + 2]);
    }
  }
};

// u8 values (floats of [0, 255] or beyond) clamped and truncated, back into the RGB pixels.
void store(const float* __restrict r, const float* __restrict g, const float* __restrict b, std::size_t n,
           std::uint8_t* __restrict px) {
  for (std::size_t i = 0; i < n; ++i) {
    px[i * 3] = to_u8(r[i]);
    px[i * 3 + 1] = to_u8(g[i]);
    px[i * 3 + 2] = to_u8(b[i]);
  }
}

// torchvision's _rgb_to_grayscale_image(preserve_dtype=False) on u8, floored (adjust_contrast and
// adjust_saturation floor it): r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114), the
// additions fused multiply-adds in torch's vector code, emulated exactly in double (a u8 times a
// float plus a float below 256 is exact there). The values are >= 0: truncation floors them.
void floored_gray(const Planes& p, std::size_t n, float* __restrict out) {
  const float kr = f32(0.2989);
  const double kg = f32(0.587), kb = f32(0.114);
  for (std::size_t i = 0; i < n; ++i) {
    const float l = p.r[i] * kr;
    const float l2 = static_cast<float>(static_cast<double>(p.g[i]) * kg + static_cast<double>(l));
    const float l3 = static_cast<float>(static_cast<double>(p.b[i]) * kb + static_cast<double>(l2));
    out[i] = static_cast<float>(static_cast<int>(l3));
  }
}

}  // namespace

ColorJitterRanges color_jitter_ranges(double brightness, double contrast, double saturation, double hue) {
  ColorJitterRanges r;
  const auto around_one = [](double v) -> std::optional<std::array<double, 2>> {
    if (v == 0) return std::nullopt;
    return std::array<double, 2>{std::max(0.0, 1.0 - v), 1.0 + v};
  };
  r.brightness = around_one(brightness);
  r.contrast = around_one(contrast);
  r.saturation = around_one(saturation);
  if (hue != 0) r.hue = std::array<double, 2>{-hue, hue};
  return r;
}

ColorJitterParams draw_color_jitter(const ColorJitterRanges& ranges, SampleRandom& random) {
  ColorJitterParams p;
  for (int i = 3; i > 0; --i) std::swap(p.order[i], p.order[random.integer(0, i)]);
  const auto draw = [&](const std::optional<std::array<double, 2>>& range) -> std::optional<double> {
    if (!range) return std::nullopt;
    return random.uniform((*range)[0], (*range)[1]);
  };
  p.brightness = draw(ranges.brightness);
  p.contrast = draw(ranges.contrast);
  p.saturation = draw(ranges.saturation);
  p.hue = draw(ranges.hue);
  return p;
}

// adjust_brightness_image: image.mul(factor).clamp_(0, 255).to(uint8), a function of the value.
void adjust_brightness(std::uint8_t* image, std::size_t pixels, int channels, double factor) {
  const std::array<float, 256> x = scaled(factor);
  std::uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = to_u8(x[static_cast<std::size_t>(v)]);
  const std::size_t n = pixels * static_cast<std::size_t>(channels);
  for (std::size_t i = 0; i < n; ++i) image[i] = lut[image[i]];
}

// adjust_contrast_image: a blend with the mean of the floored grayscale image (of the image itself
// for one channel). The grayscale values are whole numbers, so their sum is exact; torch's float32
// sum is too while it stays below 2^24 (every image up to 256 x 256, and larger ones of less
// light), and torch.mean is that sum divided by the count in float32.
void adjust_contrast(std::uint8_t* image, std::size_t pixels, int channels, double factor) {
  std::uint64_t sum = 0;
  if (channels == 3) {
    Planes p;
    float gray[kChunk];
    for (std::size_t at = 0; at < pixels; at += kChunk) {
      const std::size_t n = std::min(kChunk, pixels - at);
      p.load(image + at * 3, n);
      floored_gray(p, n, gray);
      std::uint32_t part = 0;  // at most 256 * 255
      for (std::size_t i = 0; i < n; ++i) part += static_cast<std::uint32_t>(gray[i]);
      sum += part;
    }
  } else {
    for (std::size_t i = 0; i < pixels; ++i) sum += image[i];
  }
  const float mean = pixels ? static_cast<float>(sum) / static_cast<float>(pixels) : 0.0f;
  const double other_alpha = static_cast<double>(mean) * static_cast<double>(f32(1.0 - factor));
  const std::array<float, 256> x = scaled(factor);
  std::uint8_t lut[256];
  for (int v = 0; v < 256; ++v) lut[v] = blend(x[static_cast<std::size_t>(v)], other_alpha);
  const std::size_t n = pixels * static_cast<std::size_t>(channels);
  for (std::size_t i = 0; i < n; ++i) image[i] = lut[image[i]];
}

// adjust_saturation_image: a blend of each pixel with its own floored grayscale value.
void adjust_saturation(std::uint8_t* image, std::size_t pixels, int channels, double factor) {
  if (channels != 3) return;
  const float ratio = f32(factor);
  const double alpha = static_cast<double>(f32(1.0 - factor));
  Planes p;
  float gray[kChunk];
  for (std::size_t at = 0; at < pixels; at += kChunk) {
    const std::size_t n = std::min(kChunk, pixels - at);
    p.load(image + at * 3, n);
    floored_gray(p, n, gray);
    // _blend: image.mul(ratio).add_(gray, alpha=1 - ratio), one rounding for the addition.
    for (float* plane : {p.r, p.g, p.b}) {
      for (std::size_t i = 0; i < n; ++i) {
        plane[i] = static_cast<float>(static_cast<double>(gray[i]) * alpha + static_cast<double>(plane[i] * ratio));
      }
    }
    store(p.r, p.g, p.b, n, image + at * 3);
  }
}

// adjust_hue_image: to float32 (x * float(1 / 255)), torchvision's _rgb_to_hsv, the hue shifted
// and taken modulo 1, _hsv_to_rgb, and back to u8 as to_dtype_image does it: v * float(255.999)
// truncated. Step for step the float32 operations torch runs, in its order.
void adjust_hue(std::uint8_t* image, std::size_t pixels, int channels, double factor) {
  if (channels != 3) return;
  const float unit = f32(1.0 / 255.0), sixth = f32(1.0 / 6.0), shift = f32(factor);
  const float to_u8_scale = f32(255.0 + 1.0 - 1e-3);
  Planes p;
  for (std::size_t at = 0; at < pixels; at += kChunk) {
    const std::size_t n = std::min(kChunk, pixels - at);
    p.load(image + at * 3, n);
    for (std::size_t i = 0; i < n; ++i) {
      const float r = p.r[i] * unit, g = p.g[i] * unit, b = p.b[i] * unit;
      // _rgb_to_hsv
      const float maxc = std::max(std::max(r, g), b), minc = std::min(std::min(r, g), b);
      const bool eqc = maxc == minc;
      const float range = maxc - minc;
      const float s = range / (eqc ? 1.0f : maxc);
      const float divisor = eqc ? 1.0f : range;
      const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
      const bool max_not_r = maxc != r, max_is_g = maxc == g;
      const float hg = ((rc + 2.0f) - bc) * ((max_is_g & max_not_r) ? 1.0f : 0.0f);
      const float hr = (bc - gc) * (max_not_r ? 0.0f : 1.0f);
      const float hb = ((gc + 4.0f) - rc) * ((max_not_r & !max_is_g) ? 1.0f : 0.0f);
      // fmod(h / 6 + 1, 1): h is within [-1, 5], so the sum within (0, 2) and fmod a subtraction
      // of 1 or none (exact either way). Both are computed and one is chosen: no branch, so that
      // the loop vectorises.
      const float h1 = ((hr + hg) + hb) * sixth + 1.0f, h1_less = h1 - 1.0f;
      const float h2 = (h1 >= 1.0f ? h1_less : h1) + shift;
      // remainder(h + shift, 1): the sum is within [-0.5, 1.5); torch's remainder adds 1 to fmod's
      // negative result (rounded once), and fmod subtracts 1 from one of 1 or more.
      const float h2_more = h2 + 1.0f, h2_less = h2 - 1.0f;
      const float h = h2 < 0.0f ? h2_more : h2 >= 1.0f ? h2_less : h2;
      // _hsv_to_rgb: h6 within [0, 6] (6 when h rounds up), whose floor is its truncation.
      const float h6 = h * 6.0f;
      const float fl = static_cast<float>(static_cast<int>(h6));
      const float f = h6 - fl;
      const float sector = fl == 6.0f ? 0.0f : fl;  // i.remainder_(6)
      const float v = maxc;
      const float sxf = s * f;
      const float one_minus_s = 1.0f - s;
      const float q = std::clamp((1.0f - sxf) * v, 0.0f, 1.0f);
      const float t = std::clamp((sxf + one_minus_s) * v, 0.0f, 1.0f);
      const float pp = std::clamp(one_minus_s * v, 0.0f, 1.0f);
      // The channels by sector (torchvision's select table over v, p, q, t), as sums of the four
      // values times masks of 0 and 1: exactly the one chosen (they are finite, >= 0), and no
      // branch, so that the loop vectorises.
      const float m0 = sector == 0.0f ? 1.0f : 0.0f, m1 = sector == 1.0f ? 1.0f : 0.0f,
                  m2 = sector == 2.0f ? 1.0f : 0.0f, m3 = sector == 3.0f ? 1.0f : 0.0f,
                  m4 = sector == 4.0f ? 1.0f : 0.0f, m5 = sector == 5.0f ? 1.0f : 0.0f;
      const float out_r = v * (m0 + m5) + q * m1 + t * m4 + pp * (m2 + m3);
      const float out_g = v * (m1 + m2) + t * m0 + q * m3 + pp * (m4 + m5);
      const float out_b = v * (m3 + m4) + t * m2 + q * m5 + pp * (m0 + m1);
      // to_dtype_image(uint8, scale=True): v * 255.999 truncated (within [0, 255.999]).
      p.r[i] = out_r * to_u8_scale;
      p.g[i] = out_g * to_u8_scale;
      p.b[i] = out_b * to_u8_scale;
    }
    store(p.r, p.g, p.b, n, image + at * 3);
  }
}

void color_jitter(std::uint8_t* image, std::size_t pixels, int channels, const ColorJitterParams& params) {
  for (const int fn : params.order) {
    if (fn == 0 && params.brightness) adjust_brightness(image, pixels, channels, *params.brightness);
    if (fn == 1 && params.contrast) adjust_contrast(image, pixels, channels, *params.contrast);
    if (fn == 2 && params.saturation) adjust_saturation(image, pixels, channels, *params.saturation);
    if (fn == 3 && params.hue) adjust_hue(image, pixels, channels, *params.hue);
  }
}

}  // namespace stoker::detail
