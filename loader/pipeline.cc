#include "loader/pipeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "loader/ops/image_decode.h"
#include "loader/ops/resize.h"
#include "loader/sampler.h"
#include "stoker/error.h"

namespace stoker {

// ---- public helpers (stoker/pipeline.h) ----

std::byte* SampleOut::resize(DType dtype, std::span<const std::int64_t> shape) {
  std::uint64_t bytes = dtype_size(dtype);
  for (std::int64_t d : shape) {
    if (d < 0 || (d > 0 && static_cast<std::uint64_t>(d) > kMaxSampleBytes / std::max<std::uint64_t>(bytes, 1))) {
      throw Error(fmt::format("an output of shape [{}] is more than a sample may hold ({} bytes, kMaxSampleBytes)",
                              fmt::join(shape, ","), kMaxSampleBytes));
    }
    bytes *= static_cast<std::uint64_t>(d);
  }
  dtype_ = dtype;
  shape_.assign(shape.begin(), shape.end());
  size_ = bytes;
  if (target_ && bytes != target_bytes_) target_ = nullptr;  // not the declared output: the caller says so
  if (target_) return target_;
  if (buffer_.size() < bytes) buffer_.resize(bytes);
  return buffer_.data();
}

std::uint64_t SampleRandom::next() noexcept { return detail::splitmix64_mix(state_ += 0x9e3779b97f4a7c15ull); }

double SampleRandom::uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::int64_t SampleRandom::integer(std::int64_t lo, std::int64_t hi) noexcept {
  if (hi <= lo) return lo;
  const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<std::int64_t>(static_cast<double>(span) * uniform());
}

namespace {

std::map<std::string, UserOp, std::less<>>& user_ops() {
  static std::map<std::string, UserOp, std::less<>> ops;
  return ops;
}

constexpr std::string_view kBuiltins[] = {"decode", "decode_jpeg", "decode_png", "random_resized_crop", "resize",
                                          "center_crop", "flip", "to_chw", "normalize"};

bool is_builtin(std::string_view name) {
  return std::find(std::begin(kBuiltins), std::end(kBuiltins), name) != std::end(kBuiltins);
}

std::string known_ops() {
  std::vector<std::string> names(std::begin(kBuiltins), std::end(kBuiltins));
  for (const auto& [name, op] : user_ops()) names.push_back(name);
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

bool register_op(const std::string& name, UserOp op) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; })) {
    throw Error(fmt::format("register_op: '{}' is not a valid operation name (letters, digits and _)", name));
  }
  if (is_builtin(name) || user_ops().count(name)) {
    throw Error(fmt::format("register_op: an operation named '{}' is already registered", name));
  }
  if (!op.spec || !op.run) throw Error(fmt::format("register_op: operation '{}' needs both spec and run", name));
  user_ops().emplace(name, std::move(op));
  return true;
}

namespace detail {
namespace {

// ---- parsing ----

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

OpText parse_op(std::string_view text, std::string_view field) {
  OpText op;
  op.text = std::string(trim(text));
  std::string_view t = op.text;
  const auto paren = t.find('(');
  op.name = std::string(trim(t.substr(0, paren)));
  if (op.name.empty()) throw Error(fmt::format("pipeline: field '{}': an empty operation", field));
  if (paren == std::string_view::npos) return op;
  if (t.back() != ')') throw Error(fmt::format("pipeline: field '{}': '{}' lacks its closing ')'", field, op.text));
  std::string_view args = t.substr(paren + 1, t.size() - paren - 2);
  if (trim(args).empty()) return op;
  for (std::size_t start = 0; start <= args.size();) {
    const auto end = std::min(args.find(',', start), args.size());
    const std::string_view a = trim(args.substr(start, end - start));
    double v = 0;
    const auto [ptr, ec] = std::from_chars(a.data(), a.data() + a.size(), v);
    if (a.empty() || ec != std::errc() || ptr != a.data() + a.size() || !std::isfinite(v)) {
      throw Error(fmt::format("pipeline: field '{}': '{}': argument {} ('{}') is not a number", field, op.text,
                              op.args.size() + 1, a));
    }
    op.args.push_back(v);
    start = end + 1;
  }
  return op;
}

// ---- the operations ----

// A sample's dtype and shape between operations, and whether an image is CHW (after to_chw).
struct Spec {
  bool bytes = false;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;
  bool chw = false;
};

std::string describe(const Spec& s) {
  if (s.bytes) return "bytes";
  std::vector<std::string> dims;
  for (auto d : s.shape) dims.push_back(d < 0 ? "?" : std::to_string(d));
  return fmt::format("{}[{}]{}", dtype_name(s.dtype), fmt::join(dims, ","), s.chw ? " (CHW)" : "");
}

int positive_int(const OpText& op, std::size_t i, const char* what) {
  const double v = op.args[i];
  if (v != std::floor(v) || v < 1 || v > 65536) {
    throw Error(fmt::format("'{}': {} must be a whole number from 1 to 65536, not {}", op.text, what, v));
  }
  return static_cast<int>(v);
}

void expect_args(const OpText& op, std::initializer_list<std::size_t> counts, const char* usage) {
  if (std::find(counts.begin(), counts.end(), op.args.size()) == counts.end()) {
    throw Error(fmt::format("'{}': takes {} (got {} argument{})", op.text, usage, op.args.size(),
                            op.args.size() == 1 ? "" : "s"));
  }
}

// An image: HWC (or CHW after to_chw) with 1, 3 or 4 channels.
void expect_image(const Spec& in, const OpText& op, bool allow_chw = false) {
  if (in.bytes) throw Error(fmt::format("'{}' needs an image, and its input is encoded bytes: decode first", op.text));
  if (in.shape.size() != 3) {
    throw Error(fmt::format("'{}' needs an image (height, width, channels), and its input is {}", op.text, describe(in)));
  }
  if (in.chw && !allow_chw) throw Error(fmt::format("'{}' works on HWC images: put it before to_chw", op.text));
  if (in.dtype != DType::u8 && in.dtype != DType::f32) {
    throw Error(fmt::format("'{}' works on u8 or f32 images, and its input is {}", op.text, describe(in)));
  }
}

class Op {
 public:
  explicit Op(OpText text) : text_(std::move(text)) {}
  virtual ~Op() = default;
  // The output for `in`; records what run() needs to know of the input (its layout).
  virtual Spec bind(const Spec& in) = 0;
  virtual void run(const SampleIn& in, SampleOut& out, SampleRandom& random) = 0;
  const OpText& text() const { return text_; }

 protected:
  OpText text_;
};

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
      throw Error(fmt::format("'{}' decodes encoded images (a bytes field), and its input is {}", text_.text, describe(in)));
    }
    return Spec{false, DType::u8, {h_ ? h_ : -1, w_ ? w_ : -1, 3}, false};
  }
  void run(const SampleIn& in, SampleOut& out, SampleRandom&) override {
    const ImageInfo info = image_info(in.data);
    check_kind(info);
    check_size(info);
    decode_region(in.data, info, {0, 0, info.width, info.height}, 0, 0, pixels_, scratch_);
    std::byte* o = out.resize(DType::u8, {info.height, info.width, 3});
    std::memcpy(o, pixels_.data(), pixels_.size());
  }
  // Decodes only what `crop` takes, at the smallest scale that still covers its output size.
  void run_cropped(const SampleIn& in, CropOp& crop, SampleOut& out, SampleRandom& random) {
    const ImageInfo info = image_info(in.data);
    check_kind(info);
    check_size(info);
    const Region wanted = crop.choose(info.height, info.width, random);
    Region inside{std::max(wanted.x, 0), std::max(wanted.y, 0), 0, 0};
    inside.width = std::min(wanted.x + wanted.width, info.width) - inside.x;
    inside.height = std::min(wanted.y + wanted.height, info.height) - inside.y;
    const bool scalable = wanted.width == inside.width && wanted.height == inside.height;
    const Decoded d = decode_region(in.data, info, inside, scalable ? crop.out_w : 0, scalable ? crop.out_h : 0,
                                    pixels_, scratch_);
    crop.finish(reinterpret_cast<const std::uint8_t*>(pixels_.data()), d.height, d.width, 3, wanted, out);
  }
  bool declares_size() const { return h_ > 0; }

 private:
  void check_kind(const ImageInfo& info) const {
    const bool is_jpeg = info.kind == ImageInfo::Kind::jpeg;
    if ((text_.name == "decode_jpeg" && !is_jpeg) || (text_.name == "decode_png" && is_jpeg)) {
      throw Error(fmt::format("the image is a {}; '{}' decodes {} only (decode takes either)", is_jpeg ? "JPEG" : "PNG",
                              text_.name, is_jpeg ? "PNG" : "JPEG"));
    }
  }
  void check_size(const ImageInfo& info) const {
    if (h_ && (info.height != h_ || info.width != w_)) {
      throw Error(fmt::format("the image is {}x{} (height x width); '{}' declares {}x{}", info.height, info.width,
                              text_.text, h_, w_));
    }
  }
  int h_ = 0, w_ = 0;
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
    const std::size_t row = static_cast<std::size_t>(w) * c, at = static_cast<std::size_t>(r.y) * row + static_cast<std::size_t>(r.x) * c;
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
      resizer_.run(as<std::uint8_t>(in), h, w, c, row, reinterpret_cast<std::uint8_t*>(out.resize(DType::u8, {h_, w_, c})), h_, w_);
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
      if (p_ < 0 || p_ > 1) throw Error(fmt::format("'{}': the probability must be within [0, 1]", text_.text));
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
    const std::size_t rows = chw_ ? static_cast<std::size_t>(in.shape[0] * in.shape[1]) : static_cast<std::size_t>(in.shape[0]);
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
    if (flipped) throw Error("internal error: flip and to_chw fused on other than u8 RGB");
    if (el == 1) {
      const auto* src = reinterpret_cast<const std::uint8_t*>(in.data.data());
      auto* dst = reinterpret_cast<std::uint8_t*>(o);
      for (std::int64_t ch = 0; ch < c; ++ch) {
        for (std::int64_t i = 0; i < h * w; ++i) dst[ch * h * w + i] = src[i * c + ch];
      }
      return;
    }
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t i = 0; i < h * w; ++i) std::memcpy(o + (ch * h * w + i) * el, in.data.data() + (i * c + ch) * el, el);
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
      if (!(text_.args[c + i] > 0)) throw Error(fmt::format("'{}': std {} must be above 0", text_.text, i));
    }
  }
  Spec bind(const Spec& in) override {
    expect_image(in, text_, true);
    chw_ = in.chw;
    const std::int64_t c = chw_ ? in.shape[0] : in.shape[2];
    if (static_cast<std::size_t>(c) * 2 != text_.args.size()) {
      throw Error(fmt::format("'{}': {} means and stds for an image of {} channels ({})", text_.text,
                              text_.args.size() / 2, c, describe(in)));
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

class UserOpAdapter final : public Op {
 public:
  UserOpAdapter(OpText t, const UserOp& op) : Op(std::move(t)), op_(op) {}
  Spec bind(const Spec& in) override {
    const OpSpec out = op_.spec(OpSpec{in.bytes, in.dtype, in.shape}, text_.args);
    return Spec{out.bytes, out.dtype, out.shape, in.chw && out.shape == in.shape};
  }
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override { op_.run(in, out, text_.args, random); }

 private:
  UserOp op_;
};

std::unique_ptr<Op> make_op(const OpText& t) {
  if (t.name == "decode" || t.name == "decode_jpeg" || t.name == "decode_png") return std::make_unique<DecodeOp>(t);
  if (t.name == "random_resized_crop") return std::make_unique<RandomResizedCropOp>(t);
  if (t.name == "resize") return std::make_unique<ResizeOp>(t);
  if (t.name == "center_crop") return std::make_unique<CenterCropOp>(t);
  if (t.name == "flip") return std::make_unique<FlipOp>(t);
  if (t.name == "to_chw") return std::make_unique<ToChwOp>(t);
  if (t.name == "normalize") return std::make_unique<NormalizeOp>(t);
  const auto user = user_ops().find(t.name);
  if (user != user_ops().end()) return std::make_unique<UserOpAdapter>(t, user->second);
  throw Error(fmt::format("unknown operation '{}' (operations: {})", t.name, known_ops()));
}

}  // namespace

std::vector<FieldPipelineText> parse_pipeline(std::string_view text) {
  std::vector<FieldPipelineText> out;
  for (std::size_t start = 0; start <= text.size();) {
    const auto end = std::min(text.find(';', start), text.size());
    const std::string_view part = trim(text.substr(start, end - start));
    start = end + 1;
    if (part.empty()) continue;
    const auto eq = part.find('=');
    if (eq == std::string_view::npos) {
      throw Error(fmt::format("pipeline: '{}' is not FIELD=operations (e.g. jpeg=decode,center_crop(224))", part));
    }
    FieldPipelineText f;
    f.field = std::string(trim(part.substr(0, eq)));
    if (f.field.empty()) throw Error(fmt::format("pipeline: '{}' names no field before '='", part));
    for (const auto& other : out) {
      if (other.field == f.field) throw Error(fmt::format("pipeline: field '{}' has two pipelines", f.field));
    }
    const std::string_view ops = part.substr(eq + 1);
    int depth = 0;
    std::size_t op_start = 0;
    for (std::size_t i = 0; i <= ops.size(); ++i) {
      const char ch = i < ops.size() ? ops[i] : ',';
      if (ch == '(') ++depth;
      if (ch == ')') --depth;
      if (depth < 0) throw Error(fmt::format("pipeline: field '{}': unbalanced ')' in '{}'", f.field, ops));
      if (ch == ',' && depth == 0) {
        f.ops.push_back(parse_op(ops.substr(op_start, i - op_start), f.field));
        op_start = i + 1;
      }
    }
    if (depth != 0) throw Error(fmt::format("pipeline: field '{}': unbalanced '(' in '{}'", f.field, ops));
    out.push_back(std::move(f));
  }
  return out;
}

struct SamplePipelines::Chain {
  std::size_t field = 0;
  std::vector<std::unique_ptr<Op>> ops;
  Spec input;
  std::vector<std::int64_t> output_shape;
  std::string text;
  bool fused = false;  // ops[0] is decode and ops[1] a crop: decode only the region
  std::vector<bool> flip_then_chw;  // per op: a u8 RGB flip whose to_chw (next) mirrors in the same pass
  SampleOut a, b;
};

SamplePipelines::SamplePipelines(SamplePipelines&&) noexcept = default;
SamplePipelines& SamplePipelines::operator=(SamplePipelines&&) noexcept = default;
SamplePipelines::~SamplePipelines() = default;

SamplePipelines::SamplePipelines(std::string_view text, const Schema& source, std::uint64_t seed)
    : output_(source), seed_(seed) {
  by_field_.assign(source.fields.size(), nullptr);
  for (const auto& fp : parse_pipeline(text)) {
    const Field* field = source.find(fp.field);
    if (!field) {
      throw Error(fmt::format("pipeline: no field '{}' to run it on (fields: {})", fp.field, source.describe_fields()));
    }
    auto chain = std::make_unique<Chain>();
    chain->field = static_cast<std::size_t>(field - source.fields.data());
    chain->input = field->is_bytes() ? Spec{true, DType::u8, {}, false} : Spec{false, field->dtype, field->shape, false};
    Spec spec = chain->input;
    std::vector<std::string> texts;
    for (const auto& op_text : fp.ops) {
      try {
        auto op = make_op(op_text);
        spec = op->bind(spec);
        chain->ops.push_back(std::move(op));
      } catch (const Error& e) {
        throw Error(fmt::format("pipeline: field '{}', operation {}: {}", fp.field, chain->ops.size() + 1, e.what()));
      }
      texts.push_back(op_text.text);
    }
    chain->text = fmt::format("{}={}", fp.field, fmt::join(texts, ","));
    if (spec.bytes || std::any_of(spec.shape.begin(), spec.shape.end(), [](std::int64_t d) { return d < 0; })) {
      throw Error(fmt::format("pipeline: field '{}' ends in {}, whose size differs per sample: end it with an operation "
                              "of a fixed output size (resize(H,W), center_crop(H,W), random_resized_crop(H,W)), or "
                              "declare the size every image has with decode(H,W)",
                              fp.field, detail::describe(spec)));
    }
    auto* decode = chain->ops.empty() ? nullptr : dynamic_cast<DecodeOp*>(chain->ops[0].get());
    chain->fused = decode && !decode->declares_size() && chain->ops.size() > 1 &&
                   dynamic_cast<CropOp*>(chain->ops[1].get()) != nullptr;
    chain->output_shape = spec.shape;
    chain->flip_then_chw.assign(chain->ops.size(), false);
    for (std::size_t i = 0; i + 1 < chain->ops.size(); ++i) {
      auto* chw = dynamic_cast<ToChwOp*>(chain->ops[i + 1].get());
      chain->flip_then_chw[i] = dynamic_cast<FlipOp*>(chain->ops[i].get()) && chw && chw->rgb_u8();
    }
    Field& out = output_.fields[chain->field];
    out = Field{out.name, FieldKind::fixed, spec.dtype, spec.shape};
    by_field_[chain->field] = chain.get();
    chains_.push_back(std::move(chain));
  }
  output_.validate("pipeline");
}

std::string SamplePipelines::describe() const {
  std::vector<std::string> parts;
  for (const Chain* c : by_field_) {
    if (c) parts.push_back(c->text);
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

void SamplePipelines::run(std::size_t f, std::span<const std::byte> in, std::uint64_t epoch, std::uint64_t index,
                          std::byte* dst) {
  Chain& c = *by_field_[f];
  const std::uint64_t key[4] = {seed_, epoch, index, f};
  SampleRandom random(XXH64(key, sizeof key, 0));
  const Field& field = output_.fields[f];
  SampleIn current{c.input.bytes, c.input.dtype, c.input.shape, in};
  SampleOut* out = &c.a;
  std::size_t i = 0;
  // Each operation's output is the next one's input; the last one writes into the batch.
  auto step = [&](auto&& op) {
    const std::size_t after = i;
    out->set_target(after + 1 == c.ops.size() ? dst : nullptr, field.bytes_per_sample());
    op();
    current = SampleIn{false, out->dtype(), out->shape(), std::as_const(*out).data()};
    out = out == &c.a ? &c.b : &c.a;
  };
  if (c.fused) {
    i = 1;
    step([&] { static_cast<DecodeOp&>(*c.ops[0]).run_cropped(current, static_cast<CropOp&>(*c.ops[1]), *out, random); });
    i = 2;
  }
  for (; i < c.ops.size(); ++i) {
    if (c.flip_then_chw[i]) {
      const bool flipped = static_cast<FlipOp&>(*c.ops[i]).draw(random);
      ++i;
      step([&] { static_cast<ToChwOp&>(*c.ops[i]).run(current, *out, flipped); });
      continue;
    }
    step([&] { c.ops[i]->run(current, *out, random); });
  }
  if (current.dtype != field.dtype || !std::equal(current.shape.begin(), current.shape.end(), c.output_shape.begin(),
                                                   c.output_shape.end())) {
    throw Error(fmt::format("the pipeline made {}[{}], not the declared {}", dtype_name(current.dtype),
                            fmt::join(current.shape, ","), field.describe()));
  }
  if (current.data.data() != dst) std::memcpy(dst, current.data.data(), field.bytes_per_sample());
}

}  // namespace detail

void check_pipeline(std::string_view text) {
  for (const auto& f : detail::parse_pipeline(text)) {
    for (const auto& op : f.ops) {
      try {
        (void)detail::make_op(op);
      } catch (const Error& e) {
        throw Error(fmt::format("pipeline: field '{}': {}", f.field, e.what()));
      }
    }
  }
}

}  // namespace stoker
