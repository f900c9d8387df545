#include "loader/pipeline/ops/layout_ops.h"

#include <fmt/format.h>

#include <cstring>

#include "formats/image/planes.h"
#include "stoker/error.h"

namespace stoker::detail {

FlipOp::FlipOp(OpText t) : Op(std::move(t)) {
  expect_args(text_, {0, 1}, "no arguments, or the probability p of a flip (default 0.5)");
  if (!text_.args.empty()) {
    p_ = text_.args[0];
    if (p_ < 0 || p_ > 1)
      throw Error(ErrorCode::invalid_option, fmt::format("'{}': the probability must be within [0, 1]", text_.text));
  }
}

Spec FlipOp::bind(const Spec& in) {
  expect_image(in, text_, true);
  chw_ = in.chw;
  return in;
}

void FlipOp::run(const SampleIn& in, SampleOut& out, SampleRandom& random) {
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

ToChwOp::ToChwOp(OpText t) : Op(std::move(t)) { expect_args(text_, {0}, "no arguments"); }

Spec ToChwOp::bind(const Spec& in) {
  expect_image(in, text_);
  rgb_u8_ = in.dtype == DType::u8 && in.shape[2] == 3;
  return Spec{false, in.dtype, {in.shape[2], in.shape[0], in.shape[1]}, true};
}

void ToChwOp::run(const SampleIn& in, SampleOut& out, bool flipped) {
  const std::int64_t h = in.shape[0], w = in.shape[1], c = in.shape[2];
  const std::size_t el = dtype_size(in.dtype);
  std::byte* o = out.resize(in.dtype, {c, h, w});
  if (el == 1 && c == 3) {
    // One pass over the pixels, three planes out, a row at a time.
    const auto* src = reinterpret_cast<const std::uint8_t*>(in.data.data());
    auto* dst = reinterpret_cast<std::uint8_t*>(o);
    for (std::int64_t y = 0; y < h; ++y) {
      std::uint8_t* planes[3] = {dst + y * w, dst + (h + y) * w, dst + (2 * h + y) * w};
      formats::row_to_planes(src + y * w * 3, static_cast<int>(w), 3, planes, flipped);
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

}  // namespace stoker::detail
