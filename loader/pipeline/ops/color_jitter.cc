#include "loader/pipeline/ops/color_jitter.h"

#include <fmt/format.h>

#include <cstring>
#include <utility>

#include "loader/pipeline/ops/color_adjust.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

// color_jitter(b, c, s[, h]): torchvision's ColorJitter(b, c, s, h) on u8 images
// (loader/pipeline/ops/color_adjust.h).
class ColorJitterOp final : public Op {
 public:
  explicit ColorJitterOp(OpText t) : Op(std::move(t)) {
    expect_args(text_, {3, 4}, "(brightness, contrast, saturation) or (brightness, contrast, saturation, hue)");
    const char* names[] = {"brightness", "contrast", "saturation"};
    for (std::size_t i = 0; i < 3; ++i) {
      if (!(text_.args[i] >= 0)) {
        throw Error(ErrorCode::invalid_option,
                    fmt::format("'{}': {} must be 0 or more (its factor is drawn from [max(0, 1 - {}), 1 + {}]), "
                                "not {}",
                                text_.text, names[i], names[i], names[i], text_.args[i]));
      }
    }
    const double hue = text_.args.size() == 4 ? text_.args[3] : 0.0;
    if (!(hue >= 0 && hue <= 0.5)) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("'{}': hue must be within [0, 0.5] (its factor is drawn from [-hue, hue]), not {}",
                              text_.text, hue));
    }
    ranges_ = color_jitter_ranges(text_.args[0], text_.args[1], text_.args[2], hue);
  }
  Spec bind(const Spec& in) override {
    expect_image(in, text_);
    if (in.dtype != DType::u8 || (in.shape[2] != 1 && in.shape[2] != 3)) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("'{}' works on u8 images of 1 or 3 channels (as torchvision's ColorJitter on uint8), "
                              "and its input is {}: put it before normalize",
                              text_.text, describe(in)));
    }
    return in;
  }
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    const ColorJitterParams params = draw_color_jitter(ranges_, random);
    auto* o = reinterpret_cast<std::uint8_t*>(out.resize(DType::u8, in.shape));
    std::memcpy(o, in.data.data(), in.data.size());
    const auto c = static_cast<std::size_t>(in.shape[2]);
    color_jitter(o, in.data.size() / c, static_cast<int>(c), params);
  }

 private:
  ColorJitterRanges ranges_;
};

}  // namespace

std::unique_ptr<Op> make_color_jitter(const OpText& text) { return std::make_unique<ColorJitterOp>(text); }

}  // namespace stoker::detail
