#include "loader/pipeline/ops/image_ops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "formats/image/image_decode.h"
#include "formats/image/resize.h"
#include "loader/base/scratch.h"
#include "stoker/error.h"

namespace stoker::detail {

using formats::decode_region;
using formats::DecodePlan;
using formats::image_info;
using formats::ImageInfo;
using formats::plan_decode;
using formats::Region;
using formats::Resizer;

namespace {

int positive_int(const OpText& op, std::size_t i, const char* what) {
  const double v = op.args[i];
  if (v != std::floor(v) || v < 1 || v > 65536) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("'{}': {} must be a whole number from 1 to 65536, not {}", op.text, what, v));
  }
  return static_cast<int>(v);
}

void expect_args(const OpText& op, std::initializer_list<std::size_t> counts, const char* usage) {
  if (std::find(counts.begin(), counts.end(), op.args.size()) == counts.end()) {
    throw Error(ErrorCode::invalid_option, fmt::format("'{}': takes {} (got {} argument{})", op.text, usage,
                                                       op.args.size(), op.args.size() == 1 ? "" : "s"));
  }
}

// An image: HWC (or CHW after to_chw) with 1, 3 or 4 channels.
void expect_image(const Spec& in, const OpText& op, bool allow_chw = false) {
  if (in.bytes)
    throw Error(ErrorCode::invalid_option,
                fmt::format("'{}' needs an image, and its input is encoded bytes: decode first", op.text));
  if (in.shape.size() != 3) {
    throw Error(
        ErrorCode::invalid_option,
        fmt::format("'{}' needs an image (height, width, channels), and its input is {}", op.text, describe(in)));
  }
  if (in.chw && !allow_chw)
    throw Error(ErrorCode::invalid_option, fmt::format("'{}' works on HWC images: put it before to_chw", op.text));
  if (in.dtype != DType::u8 && in.dtype != DType::f32) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("'{}' works on u8 or f32 images, and its input is {}", op.text, describe(in)));
  }
}

// An operation that cuts a region out of an image and resizes it to a fixed size: decode reads
// only that region when it comes first.
class CropOp : public Op {
 public:
  // (size) or (height, width): the output's.
  explicit CropOp(OpText t) : Op(std::move(t)) {
    expect_args(text_, {1, 2}, "(size) or (height, width)");
    out_h = positive_int(text_, 0, "the height");
    out_w = text_.args.size() == 2 ? positive_int(text_, 1, "the width") : out_h;
  }
  Spec bind(const Spec& in) override {
    expect_image(in, text_);
    return Spec{false, in.dtype, {out_h, out_w, in.shape[2]}, false};
  }
  // The region of an h x w image this sample takes (it may extend past the image: padding).
  virtual Region choose(int h, int w, SampleRandom& random) const = 0;
  // Writes the output from the region's pixels (u8 HWC, rh x rw; the part inside the image).
  virtual void finish(const std::uint8_t* region, int rh, int rw, int c, const Region& wanted, SampleOut& out) = 0;
  int out_h = 0, out_w = 0;
};

template <class T>
const T* as(const SampleIn& in) {
  return reinterpret_cast<const T*>(in.data.data());
}

class DecodeOp final : public Op {
 public:
  explicit DecodeOp(OpText t) : Op(std::move(t)) {
    expect_args(text_, {0, 2}, "no arguments, or the (height, width) every image has");
    if (text_.args.size() == 2) {
      h_ = positive_int(text_, 0, "the height");
      w_ = positive_int(text_, 1, "the width");
    }
  }
  Spec bind(const Spec& in) override {
    if (!in.bytes && !(in.dtype == DType::u8 && in.shape.size() == 1)) {
      throw Error(
          ErrorCode::invalid_option,
          fmt::format("'{}' decodes encoded images (a bytes field), and its input is {}", text_.text, describe(in)));
    }
    return Spec{false, DType::u8, {h_ ? h_ : -1, w_ ? w_ : -1, 3}, false};
  }
  void set_limits(const OpLimits& limits) override { max_pixels_ = limits.max_image_pixels; }
  void run(const SampleIn& in, SampleOut& out, SampleRandom&) override {
    const ImageInfo info = image_info(in.data, max_pixels_);
    check_kind(info);
    check_size(info);
    // Straight into the output: the image is in memory once.
    const Region whole{0, 0, info.width, info.height};
    const DecodePlan plan = plan_decode(info, whole, 0, 0);
    std::byte* o = out.resize(DType::u8, {plan.height, plan.width, 3});
    decode_region(in.data, info, whole, plan, o, scratch_);
  }
  // Decodes only what `crop` takes, at the smallest scale that still covers its output size.
  void run_cropped(const SampleIn& in, CropOp& crop, SampleOut& out, SampleRandom& random) {
    const ImageInfo info = image_info(in.data, max_pixels_);
    check_kind(info);
    check_size(info);
    const Region wanted = crop.choose(info.height, info.width, random);
    Region inside{std::max(wanted.x, 0), std::max(wanted.y, 0), 0, 0};
    inside.width = std::min(wanted.x + wanted.width, info.width) - inside.x;
    inside.height = std::min(wanted.y + wanted.height, info.height) - inside.y;
    const bool scalable = wanted.width == inside.width && wanted.height == inside.height;
    const DecodePlan plan = plan_decode(info, inside, scalable ? crop.out_w : 0, scalable ? crop.out_h : 0);
    fit_scratch(pixels_, static_cast<std::size_t>(plan.width) * static_cast<std::size_t>(plan.height) * 3);
    decode_region(in.data, info, inside, plan, pixels_.data(), scratch_);
    crop.finish(reinterpret_cast<const std::uint8_t*>(pixels_.data()), plan.height, plan.width, 3, wanted, out);
  }
  bool declares_size() const { return h_ > 0; }

 private:
  void check_kind(const ImageInfo& info) const {
    const bool is_jpeg = info.kind == ImageInfo::Kind::jpeg;
    if ((text_.name == "decode_jpeg" && !is_jpeg) || (text_.name == "decode_png" && is_jpeg)) {
      throw Error(ErrorCode::dataset, fmt::format("the image is a {}; '{}' decodes {} only (decode takes either)",
                                                  is_jpeg ? "JPEG" : "PNG", text_.name, is_jpeg ? "PNG" : "JPEG"));
    }
  }
  void check_size(const ImageInfo& info) const {
    if (h_ && (info.height != h_ || info.width != w_)) {
      throw Error(ErrorCode::dataset, fmt::format("the image is {}x{} (height x width); '{}' declares {}x{}",
                                                  info.height, info.width, text_.text, h_, w_));
    }
  }
  int h_ = 0, w_ = 0;
  std::uint64_t max_pixels_ = OpLimits{}.max_image_pixels;
  std::vector<std::byte> pixels_, scratch_;
};

// Copies the part of `wanted` that lies inside the image (`src`, rh x rw) into an out_h x out_w
// output at wanted's offset, the rest zero (torchvision pads a center crop larger than the image).
void place(const std::uint8_t* src, int rh, int rw, int c, const Region& wanted, std::uint8_t* dst, int out_h,
           int out_w) {
  std::memset(dst, 0, static_cast<std::size_t>(out_h) * out_w * c);
  const int oy = std::max(-wanted.y, 0), ox = std::max(-wanted.x, 0);
  for (int y = 0; y < std::min(rh, out_h - oy); ++y) {
    std::memcpy(dst + (static_cast<std::size_t>(oy + y) * out_w + ox) * c, src + static_cast<std::size_t>(y) * rw * c,
                static_cast<std::size_t>(std::min(rw, out_w - ox)) * c);
  }
}

class RandomResizedCropOp final : public CropOp {
 public:
  using CropOp::CropOp;
  // torchvision.transforms.RandomResizedCrop.get_params with scale (0.08, 1) and ratio (3/4, 4/3).
  Region choose(int h, int w, SampleRandom& random) const override {
    const double area = static_cast<double>(h) * w;
    const double log_lo = std::log(3.0 / 4.0), log_hi = std::log(4.0 / 3.0);
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double target = area * random.uniform(0.08, 1.0);
      const double aspect = std::exp(random.uniform(log_lo, log_hi));
      const int cw = static_cast<int>(std::nearbyint(std::sqrt(target * aspect)));
      const int ch = static_cast<int>(std::nearbyint(std::sqrt(target / aspect)));
      if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
        const int y = static_cast<int>(random.integer(0, h - ch));
        const int x = static_cast<int>(random.integer(0, w - cw));
        return {x, y, cw, ch};
      }
    }
    const double in_ratio = static_cast<double>(w) / h;
    int cw = w, ch = h;
    if (in_ratio < 3.0 / 4.0) {
      ch = static_cast<int>(std::nearbyint(w / (3.0 / 4.0)));
    } else if (in_ratio > 4.0 / 3.0) {
      cw = static_cast<int>(std::nearbyint(h * (4.0 / 3.0)));
    }
    return {(w - cw) / 2, (h - ch) / 2, cw, ch};
  }
  void finish(const std::uint8_t* region, int rh, int rw, int c, const Region&, SampleOut& out) override {
    auto* o = reinterpret_cast<std::uint8_t*>(out.resize(DType::u8, {out_h, out_w, c}));
    resizer_.run(region, rh, rw, c, static_cast<std::size_t>(rw) * c, o, out_h, out_w);
  }
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    const int h = static_cast<int>(in.shape[0]), w = static_cast<int>(in.shape[1]), c = static_cast<int>(in.shape[2]);
    const Region r = choose(h, w, random);
    const std::size_t row = static_cast<std::size_t>(w) * c,
                      at = static_cast<std::size_t>(r.y) * row + static_cast<std::size_t>(r.x) * c;
    if (in.dtype == DType::u8) {
      auto* o = reinterpret_cast<std::uint8_t*>(out.resize(DType::u8, {out_h, out_w, c}));
      resizer_.run(as<std::uint8_t>(in) + at, r.height, r.width, c, row, o, out_h, out_w);
    } else {
      auto* o = reinterpret_cast<float*>(out.resize(DType::f32, {out_h, out_w, c}));
      resizer_.run(as<float>(in) + at, r.height, r.width, c, row, o, out_h, out_w);
    }
  }

 private:
  Resizer resizer_;
};

class CenterCropOp final : public CropOp {
 public:
  using CropOp::CropOp;
  // torchvision.transforms.CenterCrop: round((h - H) / 2) (half to even, as Python rounds), and
  // zero padding where the image is smaller than the crop.
  Region choose(int h, int w, SampleRandom&) const override {
    const int y = h >= out_h ? static_cast<int>(std::nearbyint((h - out_h) / 2.0)) : -((out_h - h) / 2);
    const int x = w >= out_w ? static_cast<int>(std::nearbyint((w - out_w) / 2.0)) : -((out_w - w) / 2);
    return {x, y, out_w, out_h};
  }
  void finish(const std::uint8_t* region, int rh, int rw, int c, const Region& wanted, SampleOut& out) override {
    place(region, rh, rw, c, wanted, reinterpret_cast<std::uint8_t*>(out.resize(DType::u8, {out_h, out_w, c})), out_h,
          out_w);
  }
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    const int h = static_cast<int>(in.shape[0]), w = static_cast<int>(in.shape[1]), c = static_cast<int>(in.shape[2]);
    const Region r = choose(h, w, random);
    const std::size_t el = dtype_size(in.dtype);
    std::byte* o = out.resize(in.dtype, {out_h, out_w, c});
    std::memset(o, 0, static_cast<std::size_t>(out_h) * out_w * c * el);
    const int y0 = std::max(r.y, 0), x0 = std::max(r.x, 0);
    const int y1 = std::min(r.y + out_h, h), x1 = std::min(r.x + out_w, w);
    for (int y = y0; y < y1; ++y) {
      std::memcpy(o + ((static_cast<std::size_t>(y - r.y) * out_w + (x0 - r.x)) * c) * el,
                  in.data.data() + ((static_cast<std::size_t>(y) * w + x0) * c) * el,
                  static_cast<std::size_t>(x1 - x0) * c * el);
    }
  }
};

class ResizeOp final : public Op {
 public:
  explicit ResizeOp(OpText t) : Op(std::move(t)) {
    expect_args(text_, {2}, "(height, width)");
    h_ = positive_int(text_, 0, "the height");
    w_ = positive_int(text_, 1, "the width");
  }
  Spec bind(const Spec& in) override {
    expect_image(in, text_);
    return Spec{false, in.dtype, {h_, w_, in.shape[2]}, false};
  }
  void run(const SampleIn& in, SampleOut& out, SampleRandom&) override {
    const int h = static_cast<int>(in.shape[0]), w = static_cast<int>(in.shape[1]), c = static_cast<int>(in.shape[2]);
    const std::size_t row = static_cast<std::size_t>(w) * c;
    if (in.dtype == DType::u8) {
      resizer_.run(as<std::uint8_t>(in), h, w, c, row,
                   reinterpret_cast<std::uint8_t*>(out.resize(DType::u8, {h_, w_, c})), h_, w_);
    } else {
      resizer_.run(as<float>(in), h, w, c, row, reinterpret_cast<float*>(out.resize(DType::f32, {h_, w_, c})), h_, w_);
    }
  }

 private:
  int h_ = 0, w_ = 0;
  Resizer resizer_;
};

class FlipOp final : public Op {
 public:
  explicit FlipOp(OpText t) : Op(std::move(t)) {
    expect_args(text_, {0, 1}, "no arguments, or the probability p of a flip (default 0.5)");
    if (!text_.args.empty()) {
      p_ = text_.args[0];
      if (p_ < 0 || p_ > 1)
        throw Error(ErrorCode::invalid_option, fmt::format("'{}': the probability must be within [0, 1]", text_.text));
    }
  }
  Spec bind(const Spec& in) override {
    expect_image(in, text_, true);
    chw_ = in.chw;
    return in;
  }
  // torchvision's RandomHorizontalFlip: flip when a uniform draw is below p.
  bool draw(SampleRandom& random) const { return random.uniform() < p_; }
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    std::byte* o = out.resize(in.dtype, in.shape);
    if (!draw(random)) {
      std::memcpy(o, in.data.data(), in.data.size());
      return;
    }
    const std::size_t el = dtype_size(in.dtype);
    if (!chw_ && el == 1 && in.shape[2] == 3) {
      const auto* src = reinterpret_cast<const std::uint8_t*>(in.data.data());
      auto* dst = reinterpret_cast<std::uint8_t*>(o);
      const std::int64_t h = in.shape[0], w = in.shape[1];
      for (std::int64_t y = 0; y < h; ++y) {
        const std::uint8_t* s = src + y * w * 3;
        std::uint8_t* d = dst + y * w * 3;
        for (std::int64_t x = 0; x < w; ++x) {
          d[x * 3] = s[(w - 1 - x) * 3];
          d[x * 3 + 1] = s[(w - 1 - x) * 3 + 1];
          d[x * 3 + 2] = s[(w - 1 - x) * 3 + 2];
        }
      }
      return;
    }
    // Rows of `w` pixels of `px` bytes each, reversed pixel by pixel.
    const std::size_t rows =
        chw_ ? static_cast<std::size_t>(in.shape[0] * in.shape[1]) : static_cast<std::size_t>(in.shape[0]);
    const std::size_t w = static_cast<std::size_t>(chw_ ? in.shape[2] : in.shape[1]);
    const std::size_t px = chw_ ? el : el * static_cast<std::size_t>(in.shape[2]);
    for (std::size_t r = 0; r < rows; ++r) {
      const std::byte* src = in.data.data() + r * w * px;
      std::byte* dst = o + r * w * px;
      for (std::size_t x = 0; x < w; ++x) std::memcpy(dst + x * px, src + (w - 1 - x) * px, px);
    }
  }

 private:
  double p_ = 0.5;
  bool chw_ = false;
};

class ToChwOp final : public Op {
 public:
  explicit ToChwOp(OpText t) : Op(std::move(t)) { expect_args(text_, {0}, "no arguments"); }
  Spec bind(const Spec& in) override {
    expect_image(in, text_);
    rgb_u8_ = in.dtype == DType::u8 && in.shape[2] == 3;
    return Spec{false, in.dtype, {in.shape[2], in.shape[0], in.shape[1]}, true};
  }
  bool rgb_u8() const { return rgb_u8_; }
  void run(const SampleIn& in, SampleOut& out, SampleRandom&) override { run(in, out, false); }
  // `flipped`: also mirror each row (flip followed by to_chw, in one pass).
  void run(const SampleIn& in, SampleOut& out, bool flipped) {
    const std::int64_t h = in.shape[0], w = in.shape[1], c = in.shape[2];
    const std::size_t el = dtype_size(in.dtype);
    std::byte* o = out.resize(in.dtype, {c, h, w});
    if (el == 1 && c == 3) {
      // One pass over the pixels, three planes out.
      const auto* src = reinterpret_cast<const std::uint8_t*>(in.data.data());
      auto* r = reinterpret_cast<std::uint8_t*>(o);
      auto* g = r + h * w;
      auto* b = g + h * w;
      for (std::int64_t y = 0; y < h; ++y) {
        const std::uint8_t* s = src + y * w * 3;
        const std::int64_t row = y * w;
        if (flipped) {
          for (std::int64_t x = 0; x < w; ++x) {
            r[row + w - 1 - x] = s[x * 3];
            g[row + w - 1 - x] = s[x * 3 + 1];
            b[row + w - 1 - x] = s[x * 3 + 2];
          }
        } else {
          for (std::int64_t x = 0; x < w; ++x) {
            r[row + x] = s[x * 3];
            g[row + x] = s[x * 3 + 1];
            b[row + x] = s[x * 3 + 2];
          }
        }
      }
      return;
    }
    if (flipped) throw Error(ErrorCode::internal, "internal error: flip and to_chw fused on other than u8 RGB");
    if (el == 1) {
      const auto* src = reinterpret_cast<const std::uint8_t*>(in.data.data());
      auto* dst = reinterpret_cast<std::uint8_t*>(o);
      for (std::int64_t ch = 0; ch < c; ++ch) {
        for (std::int64_t i = 0; i < h * w; ++i) dst[ch * h * w + i] = src[i * c + ch];
      }
      return;
    }
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t i = 0; i < h * w; ++i) {
        std::memcpy(o + (ch * h * w + i) * el, in.data.data() + (i * c + ch) * el, el);
      }
    }
  }

 private:
  bool rgb_u8_ = false;
};

class NormalizeOp final : public Op {
 public:
  explicit NormalizeOp(OpText t) : Op(std::move(t)) {
    expect_args(text_, {2, 6}, "(mean, std) for one channel or (m0, m1, m2, s0, s1, s2) for three");
    const std::size_t c = text_.args.size() / 2;
    for (std::size_t i = 0; i < c; ++i) {
      if (!(text_.args[c + i] > 0))
        throw Error(ErrorCode::invalid_option, fmt::format("'{}': std {} must be above 0", text_.text, i));
    }
  }
  Spec bind(const Spec& in) override {
    expect_image(in, text_, true);
    chw_ = in.chw;
    const std::int64_t c = chw_ ? in.shape[0] : in.shape[2];
    if (static_cast<std::size_t>(c) * 2 != text_.args.size()) {
      throw Error(ErrorCode::invalid_option, fmt::format("'{}': {} means and stds for an image of {} channels ({})",
                                                         text_.text, text_.args.size() / 2, c, describe(in)));
    }
    return Spec{false, DType::f32, in.shape, in.chw};
  }
  // f32 = (x / 255 - mean) / std for u8 input (torchvision's ToTensor then Normalize), and
  // (x - mean) / std for f32 input.
  void run(const SampleIn& in, SampleOut& out, SampleRandom&) override {
    const std::size_t c = text_.args.size() / 2;
    const float unit = in.dtype == DType::u8 ? 1.0f / 255.0f : 1.0f;
    float scale[3], shift[3];
    for (std::size_t i = 0; i < c; ++i) {
      scale[i] = static_cast<float>(unit / text_.args[c + i]);
      shift[i] = static_cast<float>(-text_.args[i] / text_.args[c + i]);
    }
    auto* o = reinterpret_cast<float*>(out.resize(DType::f32, in.shape));
    const std::size_t n = in.data.size() / dtype_size(in.dtype);
    const std::size_t plane = chw_ ? n / c : 1;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t ch = chw_ ? i / plane : i % c;
      const float x = in.dtype == DType::u8 ? static_cast<float>(as<std::uint8_t>(in)[i]) : as<float>(in)[i];
      o[i] = x * scale[ch] + shift[ch];
    }
  }

 private:
  bool chw_ = false;
};

// decode followed by a crop: only the crop's region is decoded (docs/pipeline.md, "What decode
// reads"). With decode(H,W), whose size is checked on the whole image, the two run one after the
// other.
class DecodeThenCrop final : public Op {
 public:
  DecodeThenCrop(std::unique_ptr<Op> decode, std::unique_ptr<Op> crop, Spec out)
      : Op(decode->text()), decode_(std::move(decode)), crop_(std::move(crop)), out_(std::move(out)) {}
  Spec bind(const Spec&) override { return out_; }  // bound as its two parts were
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    auto& decode = static_cast<DecodeOp&>(*decode_);
    auto& crop = static_cast<CropOp&>(*crop_);
    if (!decode.declares_size()) return decode.run_cropped(in, crop, out, random);
    decode.run(in, middle_, random);
    crop.run(SampleIn{false, middle_.dtype(), middle_.shape(), std::as_const(middle_).data()}, out, random);
  }

 private:
  std::unique_ptr<Op> decode_, crop_;
  Spec out_;
  SampleOut middle_;
};

// flip followed by to_chw on u8 RGB: the planes are written mirrored, in one pass.
class FlipThenChw final : public Op {
 public:
  FlipThenChw(std::unique_ptr<Op> flip, std::unique_ptr<Op> chw, Spec out)
      : Op(flip->text()), flip_(std::move(flip)), chw_(std::move(chw)), out_(std::move(out)) {}
  Spec bind(const Spec&) override { return out_; }  // bound as its two parts were
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    const bool flipped = static_cast<FlipOp&>(*flip_).draw(random);
    static_cast<ToChwOp&>(*chw_).run(in, out, flipped);
  }

 private:
  std::unique_ptr<Op> flip_, chw_;
  Spec out_;
};

template <class T>
std::unique_ptr<Op> make(const OpText& t) {
  return std::make_unique<T>(t);
}

}  // namespace

const std::vector<BuiltinOp>& builtin_ops() {
  static const std::vector<BuiltinOp> ops = {
      {"decode", make<DecodeOp>},       {"decode_jpeg", make<DecodeOp>},
      {"decode_png", make<DecodeOp>},   {"random_resized_crop", make<RandomResizedCropOp>},
      {"resize", make<ResizeOp>},       {"center_crop", make<CenterCropOp>},
      {"flip", make<FlipOp>},           {"to_chw", make<ToChwOp>},
      {"normalize", make<NormalizeOp>},
  };
  return ops;
}

std::unique_ptr<Op> fuse(std::unique_ptr<Op>& first, std::unique_ptr<Op>& second, const Spec& second_out) {
  if (dynamic_cast<DecodeOp*>(first.get()) && dynamic_cast<CropOp*>(second.get())) {
    return std::make_unique<DecodeThenCrop>(std::move(first), std::move(second), second_out);
  }
  auto* chw = dynamic_cast<ToChwOp*>(second.get());
  if (dynamic_cast<FlipOp*>(first.get()) && chw && chw->rgb_u8()) {
    return std::make_unique<FlipThenChw>(std::move(first), std::move(second), second_out);
  }
  return nullptr;
}

}  // namespace stoker::detail
