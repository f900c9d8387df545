// The colour adjustments of color_jitter (docs/pipeline.md): torchvision's ColorJitter on u8 images,
// with the formulas of torchvision.transforms.v2.functional on uint8 tensors (adjust_brightness,
// adjust_contrast, adjust_saturation, adjust_hue) computed in float as torch computes them, and the
// draws of its parameters from a sample's random numbers. HWC images of 1 or 3 channels, adjusted
// in place. Pure functions: safe to call from any thread on distinct images.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "stoker/pipeline.h"

namespace stoker::detail {

// What color_jitter(b, c, s[, h]) draws from: each factor uniform in [lo, hi]; an adjustment whose
// argument is 0 is not drawn and not applied (torchvision's None).
struct ColorJitterRanges {
  std::optional<std::array<double, 2>> brightness, contrast, saturation, hue;
};

// torchvision's ColorJitter._check_input: b, c, s >= 0 give [max(0, 1 - x), 1 + x], 0 <= h <= 0.5
// gives [-h, h]. The caller has checked the arguments' ranges.
ColorJitterRanges color_jitter_ranges(double brightness, double contrast, double saturation, double hue);

// One sample's parameters: the order of the four adjustments (0 brightness, 1 contrast,
// 2 saturation, 3 hue: torchvision's fn_idx) and their factors.
struct ColorJitterParams {
  std::array<int, 4> order{0, 1, 2, 3};
  std::optional<double> brightness, contrast, saturation, hue;
};

// The draws, in torchvision's order: the permutation first (Fisher-Yates from the identity:
// for i = 3, 2, 1, j = random.integer(0, i), swap order[i] and order[j]), then
// random.uniform(lo, hi) for brightness, contrast, saturation and hue, each only where its range
// is set.
ColorJitterParams draw_color_jitter(const ColorJitterRanges& ranges, SampleRandom& random);

// The adjustments, in place on `pixels` pixels of `channels` (1 or 3) u8 values, HWC. Each is
// torchvision's v2 kernel on a uint8 tensor: computed in float32 (torch's fused multiply-adds
// where its vector code has them), clamped to [0, 255] and truncated to u8. On one channel,
// saturation and hue change nothing (as torchvision).
void adjust_brightness(std::uint8_t* image, std::size_t pixels, int channels, double factor);
void adjust_contrast(std::uint8_t* image, std::size_t pixels, int channels, double factor);
void adjust_saturation(std::uint8_t* image, std::size_t pixels, int channels, double factor);
void adjust_hue(std::uint8_t* image, std::size_t pixels, int channels, double factor);

// The four adjustments that `params` sets, in its order.
void color_jitter(std::uint8_t* image, std::size_t pixels, int channels, const ColorJitterParams& params);

}  // namespace stoker::detail
