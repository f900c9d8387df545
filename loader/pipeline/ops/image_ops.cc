#include "loader/pipeline/ops/image_ops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "base/scratch.h"
#include "formats/image/image_decode.h"
#include "formats/image/resize.h"
#include "loader/pipeline/ops/color_jitter.h"
#include "loader/pipeline/ops/layout_ops.h"
#include "loader/pipeline/ops/normalize.h"
#include "stoker/error.h"

namespace stoker::detail {

using formats::decode_region;
using formats::DecodePlan;
using formats::image_info;
using formats::ImageInfo;
using formats::plan_decode;
using formats::Region;
using formats::Resizer;

Region random_resized_crop_region(int h, int w, SampleRandom& random) {
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

namespace {

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
  // Whether finish_planes() is there: the output as planes (CHW), mirrored or not, in the same
  // pass (flip and to_chw after the crop).
  virtual bool writes_planes() const { return false; }
  virtual void finish_planes(const std::uint8_t*, int, int, int, bool, SampleOut&) {
    throw Error(ErrorCode::internal, "internal error: a crop asked for planes it does not write");
  }
  int out_h = 0, out_w = 0;
};

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
    if (in.dtype != DType::u8 || (!in.bytes && in.shape.size() != 1)) {
      throw Error(
          ErrorCode::invalid_option,
          fmt::format("'{}' decodes encoded images (a bytes field), and its input is {}", text_.text, describe(in)));
    }
    return Spec{false, DType::u8, {h_ ? h_ : -1, w_ ? w_ : -1, 3}, false};
  }
  void set_limits(const OpLimits& limits) override { max_pixels_ = limits.max_image_pixels; }
  void run(const SampleIn& in, SampleOut& out, SampleRandom&) override {
    const ImageInfo info = checked_info(in);
    // Straight into the output: the image is in memory once.
    const Region whole{0, 0, info.width, info.height};
    const DecodePlan plan = plan_decode(info, whole, 0, 0);
    std::byte* o = out.resize(DType::u8, {plan.height, plan.width, 3});
    decode_region(in.data, info, whole, plan, o, scratch_);
  }
  // The image's header, checked as run() checks it.
  ImageInfo checked_info(const SampleIn& in) const {
    const ImageInfo info = image_info(in.data, max_pixels_);
    check_kind(info);
    check_size(info);
    return info;
  }
  // Decodes only `wanted` (the crop's choice), at the smallest scale that still covers the crop's
  // output size, and has the crop finish: interleaved, or with `mirrored`, as planes mirrored or not.
  void run_cropped(const SampleIn& in, const ImageInfo& info, CropOp& crop, const Region& wanted, SampleOut& out,
                   const bool* mirrored) {
    Region inside{std::max(wanted.x, 0), std::max(wanted.y, 0), 0, 0};
    inside.width = std::min(wanted.x + wanted.width, info.width) - inside.x;
    inside.height = std::min(wanted.y + wanted.height, info.height) - inside.y;
    const bool scalable = wanted.width == inside.width && wanted.height == inside.height;
    const DecodePlan plan = plan_decode(info, inside, scalable ? crop.out_w : 0, scalable ? crop.out_h : 0);
    fit_scratch(pixels_, static_cast<std::size_t>(plan.width) * static_cast<std::size_t>(plan.height) * 3);
    decode_region(in.data, info, inside, plan, pixels_.data(), scratch_);
    const auto* region = reinterpret_cast<const std::uint8_t*>(pixels_.data());
    if (mirrored) {
      crop.finish_planes(region, plan.height, plan.width, 3, *mirrored, out);
    } else {
      crop.finish(region, plan.height, plan.width, 3, wanted, out);
    }
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

// Copies the part of `wanted` that lies inside the image (`src`, rh x rw pixels of `px` bytes) into
// an out_h x out_w output at wanted's offset, the rest zero (torchvision pads a center crop larger
// than the image).
void place(const std::byte* src, int rh, int rw, std::size_t px, const Region& wanted, std::byte* dst, int out_h,
           int out_w) {
  std::memset(dst, 0, static_cast<std::size_t>(out_h) * out_w * px);
  const int oy = std::max(-wanted.y, 0), ox = std::max(-wanted.x, 0);
  for (int y = 0; y < std::min(rh, out_h - oy); ++y) {
    std::memcpy(dst + (static_cast<std::size_t>(oy + y) * out_w + ox) * px, src + static_cast<std::size_t>(y) * rw * px,
                static_cast<std::size_t>(std::min(rw, out_w - ox)) * px);
  }
}

class RandomResizedCropOp final : public CropOp {
 public:
  using CropOp::CropOp;
  Region choose(int h, int w, SampleRandom& random) const override { return random_resized_crop_region(h, w, random); }
  void finish(const std::uint8_t* region, int rh, int rw, int c, const Region&, SampleOut& out) override {
    auto* o = reinterpret_cast<std::uint8_t*>(out.resize(DType::u8, {out_h, out_w, c}));
    resizer_.run(region, rh, rw, c, static_cast<std::size_t>(rw) * c, o, out_h, out_w);
  }
  bool writes_planes() const override { return true; }
  void finish_planes(const std::uint8_t* region, int rh, int rw, int c, bool mirrored, SampleOut& out) override {
    auto* o = reinterpret_cast<std::uint8_t*>(out.resize(DType::u8, {c, out_h, out_w}));
    resizer_.run(region, rh, rw, c, static_cast<std::size_t>(rw) * c, o, out_h, out_w,
                 Resizer::Window{0, 0, out_h, out_w}, Resizer::Layout{true, mirrored});
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
    place(reinterpret_cast<const std::byte*>(region), rh, rw, static_cast<std::size_t>(c), wanted,
          out.resize(DType::u8, {out_h, out_w, c}), out_h, out_w);
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

// resize(H,W): to that size. resize(S): the shorter side to S, the longer to int(S * long / short)
// (torchvision's Resize(S)). An image already of that size is left as it is.
class ResizeOp final : public Op {
 public:
  explicit ResizeOp(OpText t) : Op(std::move(t)) {
    expect_args(text_, {1, 2}, "(size) for the shorter side, or (height, width)");
    if (text_.args.size() == 1) {
      short_ = positive_int(text_, 0, "the shorter side");
    } else {
      h_ = positive_int(text_, 0, "the height");
      w_ = positive_int(text_, 1, "the width");
    }
  }
  Spec bind(const Spec& in) override {
    expect_image(in, text_);
    if (!short_) return Spec{false, in.dtype, {h_, w_, in.shape[2]}, false};
    // Each image's own size unless the input's is declared (decode(H,W), a fixed field).
    if (in.shape[0] < 0 || in.shape[1] < 0) return Spec{false, in.dtype, {-1, -1, in.shape[2]}, false};
    const auto [oh, ow] = output_size(in.shape[0], in.shape[1]);
    return Spec{false, in.dtype, {oh, ow, in.shape[2]}, false};
  }
  void set_limits(const OpLimits& limits) override { max_pixels_ = limits.max_image_pixels; }
  // The output's height and width for an h x w image. For resize(S), one of more pixels than
  // Options::max_image_pixels (a strip's long side times S) is the sample's error, as for decode.
  std::pair<std::int64_t, std::int64_t> output_size(std::int64_t h, std::int64_t w) const {
    if (!short_) return {h_, w_};
    const std::int64_t shorter = std::min(h, w), longer = std::max(h, w);
    // Python's int(S * long / short): the exact product, one correctly rounded division, truncated.
    const auto new_long =
        static_cast<std::int64_t>(static_cast<double>(short_ * longer) / static_cast<double>(shorter));
    const std::int64_t oh = w <= h ? new_long : short_, ow = w <= h ? short_ : new_long;
    const std::uint64_t pixels = static_cast<std::uint64_t>(oh) * static_cast<std::uint64_t>(ow);
    if (pixels > max_pixels_ || new_long > std::numeric_limits<int>::max()) {
      throw Error(ErrorCode::dataset,
                  fmt::format("'{}' of a {}x{} image (height x width) makes it {}x{}, {} pixels, more than the {} "
                              "allowed (Options::max_image_pixels): an image of extreme aspect ratio",
                              text_.text, h, w, oh, ow, pixels, max_pixels_));
    }
    return {oh, ow};
  }
  void run(const SampleIn& in, SampleOut& out, SampleRandom&) override {
    const int h = static_cast<int>(in.shape[0]), w = static_cast<int>(in.shape[1]), c = static_cast<int>(in.shape[2]);
    const auto [oh, ow] = output_size(h, w);
    run_window(in, static_cast<int>(oh), static_cast<int>(ow),
               Resizer::Window{0, 0, static_cast<int>(oh), static_cast<int>(ow)}, out.resize(in.dtype, {oh, ow, c}));
  }
  // `window` of the oh x ow resize of `in`, into `dst` (window.height x window.width, contiguous).
  void run_window(const SampleIn& in, int oh, int ow, const Resizer::Window& window, std::byte* dst) {
    const int h = static_cast<int>(in.shape[0]), w = static_cast<int>(in.shape[1]), c = static_cast<int>(in.shape[2]);
    const std::size_t row = static_cast<std::size_t>(w) * c;
    if (oh == h && ow == w) {  // already of that size (a dataset stored resized): the window's pixels as they are
      const std::size_t px = static_cast<std::size_t>(c) * dtype_size(in.dtype);
      for (int y = 0; y < window.height; ++y) {
        std::memcpy(dst + static_cast<std::size_t>(y) * window.width * px,
                    in.data.data() + (static_cast<std::size_t>(window.y + y) * w + window.x) * px,
                    static_cast<std::size_t>(window.width) * px);
      }
      return;
    }
    if (in.dtype == DType::u8) {
      resizer_.run(as<std::uint8_t>(in), h, w, c, row, reinterpret_cast<std::uint8_t*>(dst), oh, ow, window);
    } else {
      resizer_.run(as<float>(in), h, w, c, row, reinterpret_cast<float*>(dst), oh, ow, window);
    }
  }

 private:
  int h_ = 0, w_ = 0;
  std::int64_t short_ = 0;
  std::uint64_t max_pixels_ = OpLimits{}.max_image_pixels;
  Resizer resizer_;
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
    if (!decode().declares_size()) {
      const ImageInfo info = decode().checked_info(in);
      const Region wanted = crop().choose(info.height, info.width, random);
      return decode().run_cropped(in, info, crop(), wanted, out, nullptr);
    }
    decode().run(in, middle_, random);
    crop().run(SampleIn{false, middle_.dtype(), middle_.shape(), std::as_const(middle_).data()}, out, random);
  }
  DecodeOp& decode() { return static_cast<DecodeOp&>(*decode_); }
  CropOp& crop() { return static_cast<CropOp&>(*crop_); }
  // Whether flip and to_chw after it can be written by the crop in its pass.
  bool writes_planes() { return !decode().declares_size() && crop().writes_planes(); }

 private:
  std::unique_ptr<Op> decode_, crop_;
  Spec out_;
  SampleOut middle_;
};

// resize followed by center_crop (the validation transform): only the crop's part of the resize is
// computed, the values of resizing whole and cropping, at the crop's cost, not the resized image's.
class ResizeThenCrop final : public Op {
 public:
  ResizeThenCrop(std::unique_ptr<Op> resize, std::unique_ptr<Op> crop, Spec out)
      : Op(resize->text()), resize_(std::move(resize)), crop_(std::move(crop)), out_(std::move(out)) {}
  Spec bind(const Spec&) override { return out_; }  // bound as its two parts were
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    auto& resize = static_cast<ResizeOp&>(*resize_);
    auto& crop = static_cast<CenterCropOp&>(*crop_);
    const auto [oh, ow] = resize.output_size(in.shape[0], in.shape[1]);
    const int rh = static_cast<int>(oh), rw = static_cast<int>(ow), c = static_cast<int>(in.shape[2]);
    const Region wanted = crop.choose(rh, rw, random);
    // The part of the crop inside the resized image; the rest is padding.
    Resizer::Window inside{std::max(wanted.y, 0), std::max(wanted.x, 0), 0, 0};
    inside.height = std::min(wanted.y + wanted.height, rh) - inside.y;
    inside.width = std::min(wanted.x + wanted.width, rw) - inside.x;
    std::byte* o = out.resize(in.dtype, {crop.out_h, crop.out_w, c});
    if (inside.height == crop.out_h && inside.width == crop.out_w) return resize.run_window(in, rh, rw, inside, o);
    const std::size_t px = static_cast<std::size_t>(c) * dtype_size(in.dtype);
    fit_scratch(middle_, static_cast<std::size_t>(inside.height) * static_cast<std::size_t>(inside.width) * px);
    resize.run_window(in, rh, rw, inside, middle_.data());
    place(middle_.data(), inside.height, inside.width, px, wanted, o, crop.out_h, crop.out_w);
  }

 private:
  std::unique_ptr<Op> resize_, crop_;
  Spec out_;
  std::vector<std::byte> middle_;
};

// decode and a crop that writes planes, followed by flip and to_chw: the region is decoded,
// resized, mirrored or not and split into planes in one pass, the draws in the order of the four
// operations run one by one (the crop's region, then the flip), so the same output.
class DecodeCropToPlanes final : public Op {
 public:
  DecodeCropToPlanes(std::unique_ptr<Op> crop, std::unique_ptr<Op> planes, Spec out)
      : Op(crop->text()), crop_(std::move(crop)), planes_(std::move(planes)), out_(std::move(out)) {}
  Spec bind(const Spec&) override { return out_; }  // bound as its parts were
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    auto& first = static_cast<DecodeThenCrop&>(*crop_);
    const ImageInfo info = first.decode().checked_info(in);
    const Region wanted = first.crop().choose(info.height, info.width, random);
    const bool mirrored = static_cast<FlipThenChw&>(*planes_).flip().draw(random);
    first.decode().run_cropped(in, info, first.crop(), wanted, out, &mirrored);
  }

 private:
  std::unique_ptr<Op> crop_, planes_;
  Spec out_;
};

template <class T>
std::unique_ptr<Op> make(const OpText& t) {
  return std::make_unique<T>(t);
}

}  // namespace

const std::vector<BuiltinOp>& builtin_ops() {
  static const std::vector<BuiltinOp> ops = {
      {"decode", make<DecodeOp>},     {"decode_jpeg", make<DecodeOp>},
      {"decode_png", make<DecodeOp>}, {"random_resized_crop", make<RandomResizedCropOp>},
      {"resize", make<ResizeOp>},     {"center_crop", make<CenterCropOp>},
      {"flip", make<FlipOp>},         {"color_jitter", make_color_jitter},
      {"to_chw", make<ToChwOp>},      {"normalize", make_normalize},
  };
  return ops;
}

std::unique_ptr<Op> fuse(std::unique_ptr<Op>& first, std::unique_ptr<Op>& second, const Spec& second_out) {
  if (dynamic_cast<DecodeOp*>(first.get()) && dynamic_cast<CropOp*>(second.get())) {
    return std::make_unique<DecodeThenCrop>(std::move(first), std::move(second), second_out);
  }
  if (dynamic_cast<ResizeOp*>(first.get()) && dynamic_cast<CenterCropOp*>(second.get())) {
    return std::make_unique<ResizeThenCrop>(std::move(first), std::move(second), second_out);
  }
  auto* crop = dynamic_cast<DecodeThenCrop*>(first.get());
  if (crop && crop->writes_planes() && dynamic_cast<FlipThenChw*>(second.get())) {
    return std::make_unique<DecodeCropToPlanes>(std::move(first), std::move(second), second_out);
  }
  auto* chw = dynamic_cast<ToChwOp*>(second.get());
  if (dynamic_cast<FlipOp*>(first.get()) && chw && chw->rgb_u8()) {
    return std::make_unique<FlipThenChw>(std::move(first), std::move(second), second_out);
  }
  return nullptr;
}

}  // namespace stoker::detail
