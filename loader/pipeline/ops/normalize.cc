#include "loader/pipeline/ops/normalize.h"

#include <fmt/format.h>

#include <utility>

#include "stoker/error.h"

namespace stoker::detail {
namespace {

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

}  // namespace

std::unique_ptr<Op> make_normalize(const OpText& text) { return std::make_unique<NormalizeOp>(text); }

}  // namespace stoker::detail
