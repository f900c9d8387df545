// The operations that move pixels without computing new ones: flip (torchvision's
// RandomHorizontalFlip) and to_chw (the layout PyTorch models take), and the two run as one copy
// (flip followed by to_chw on u8 RGB: the planes written mirrored).
#pragma once

#include <memory>

#include "loader/pipeline/ops/op.h"

namespace stoker::detail {

class FlipOp final : public Op {
 public:
  // flip, or flip(p): a flip with probability p (default 0.5).
  explicit FlipOp(OpText t);
  Spec bind(const Spec& in) override;
  // torchvision's RandomHorizontalFlip: flip when a uniform draw is below p.
  bool draw(SampleRandom& random) const { return random.uniform() < p_; }
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override;

 private:
  double p_ = 0.5;
  bool chw_ = false;
};

class ToChwOp final : public Op {
 public:
  explicit ToChwOp(OpText t);
  Spec bind(const Spec& in) override;
  // Whether its input is u8 RGB (what flip and to_chw in one copy takes).
  bool rgb_u8() const { return rgb_u8_; }
  void run(const SampleIn& in, SampleOut& out, SampleRandom&) override { run(in, out, false); }
  // `flipped`: also mirror each row (flip followed by to_chw, in one pass; u8 RGB only).
  void run(const SampleIn& in, SampleOut& out, bool flipped);

 private:
  bool rgb_u8_ = false;
};

// flip followed by to_chw on u8 RGB: the planes are written mirrored, in one pass.
class FlipThenChw final : public Op {
 public:
  FlipThenChw(std::unique_ptr<Op> flip, std::unique_ptr<Op> chw, Spec out)
      : Op(flip->text()), flip_(std::move(flip)), chw_(std::move(chw)), out_(std::move(out)) {}
  Spec bind(const Spec&) override { return out_; }  // bound as its two parts were
  void run(const SampleIn& in, SampleOut& out, SampleRandom& random) override {
    static_cast<ToChwOp&>(*chw_).run(in, out, flip().draw(random));
  }
  const FlipOp& flip() const { return static_cast<const FlipOp&>(*flip_); }

 private:
  std::unique_ptr<Op> flip_, chw_;
  Spec out_;
};

}  // namespace stoker::detail
