// color_jitter: torchvision's ColorJitter on u8 images. The values expected here are those of
// torchvision 0.29's transforms.v2.functional kernels on uint8 tensors (tests/tools/torchvision_ref.py
// computes them; tests/tools/image_check.py compares whole photographs), chosen where a rounding
// rule shows: torch truncates the float result, it does not round it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loader/pipeline/ops/color_adjust.h"
#include "loader/pipeline/pipeline.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

using ::testing::HasSubstr;
using Pixels = std::vector<std::uint8_t>;

// Four RGB pixels: black and near-black, mid tones, pure red, a saturated green.
const Pixels kRgb = {0, 1, 100, 101, 200, 255, 255, 0, 0, 12, 200, 77};
const Pixels kGray = {0, 1, 100, 200};

Pixels adjusted(void (*adjust)(std::uint8_t*, std::size_t, int, double), Pixels image, int channels, double factor) {
  adjust(image.data(), image.size() / static_cast<std::size_t>(channels), channels, factor);
  return image;
}

TEST(ColorJitter, BrightnessMultipliesInFloatAndTruncates) {
  // 1 * 0.7 = 0.7 -> 0, 101 * 0.7 = 70.7 -> 70, 255 * 0.7 = 178.5 -> 178; above 255 clamps.
  EXPECT_EQ(adjusted(adjust_brightness, kRgb, 3, 0.7), (Pixels{0, 0, 70, 70, 140, 178, 178, 0, 0, 8, 140, 53}));
  EXPECT_EQ(adjusted(adjust_brightness, kRgb, 3, 1.3), (Pixels{0, 1, 130, 131, 255, 255, 255, 0, 0, 15, 255, 100}));
  EXPECT_EQ(adjusted(adjust_brightness, kGray, 1, 0.7), (Pixels{0, 0, 70, 140}));
}

TEST(ColorJitter, ContrastBlendsWithTheMeanOfTheFlooredGrayscale) {
  // Grey levels floor(0.2989 r + 0.587 g + 0.114 b): 11, 176, 76, 129; their mean 98.
  EXPECT_EQ(adjusted(adjust_contrast, kRgb, 3, 0.5), (Pixels{49, 49, 99, 99, 149, 176, 176, 49, 49, 55, 149, 87}));
  EXPECT_EQ(adjusted(adjust_contrast, kRgb, 3, 1.6), (Pixels{0, 0, 101, 102, 255, 255, 255, 0, 0, 0, 255, 64}));
  // One channel: the mean of the values themselves.
  EXPECT_EQ(adjusted(adjust_contrast, kGray, 1, 1.6), (Pixels{0, 0, 114, 255}));
}

TEST(ColorJitter, SaturationBlendsEachPixelWithItsFlooredGrayscale) {
  EXPECT_EQ(adjusted(adjust_saturation, kRgb, 3, 0.0), (Pixels{11, 11, 11, 176, 176, 176, 76, 76, 76, 129, 129, 129}));
  EXPECT_EQ(adjusted(adjust_saturation, kRgb, 3, 1.7), (Pixels{0, 0, 162, 48, 216, 255, 255, 0, 0, 0, 249, 40}));
  EXPECT_EQ(adjusted(adjust_saturation, kGray, 1, 1.7), kGray);  // as torchvision: no colour, no change
}

TEST(ColorJitter, HueTurnsInHsvAndComesBackScaledBy255Point999Truncated) {
  EXPECT_EQ(adjusted(adjust_hue, kRgb, 3, 0.0), kRgb);
  // Half a turn: red becomes cyan.
  EXPECT_EQ(adjusted(adjust_hue, kRgb, 3, 0.5), (Pixels{100, 99, 0, 255, 156, 101, 0, 255, 255, 200, 12, 135}));
  EXPECT_EQ(adjusted(adjust_hue, kRgb, 3, -0.2), (Pixels{0, 100, 79, 101, 255, 125, 204, 0, 255, 173, 200, 12}));
  EXPECT_EQ(adjusted(adjust_hue, kGray, 1, 0.3), kGray);
}

TEST(ColorJitter, AppliesTheAdjustmentsItsParametersSetInTheirOrder) {
  ColorJitterParams p;
  p.brightness = 1.2;
  p.contrast = 0.8;
  p.saturation = 1.5;
  p.hue = 0.1;
  Pixels image = kRgb;
  p.order = {3, 1, 0, 2};
  color_jitter(image.data(), 4, 3, p);
  EXPECT_EQ(image, (Pixels{99, 12, 156, 113, 124, 255, 255, 170, 0, 0, 245, 230}));
  image = kRgb;
  p.order = {0, 1, 2, 3};
  color_jitter(image.data(), 4, 3, p);
  EXPECT_EQ(image, (Pixels{100, 16, 160, 85, 131, 246, 255, 153, 0, 0, 248, 220}));
  // Those not set are skipped wherever they come.
  image = kRgb;
  p.brightness.reset();
  p.saturation.reset();
  p.order = {2, 0, 3, 1};
  color_jitter(image.data(), 4, 3, p);
  EXPECT_EQ(image, (Pixels{70, 22, 102, 103, 109, 226, 226, 145, 22, 32, 182, 174}));
}

TEST(ColorJitter, DrawsThePermutationThenEachFactorWhoseArgumentIsNotZero) {
  const ColorJitterRanges ranges = color_jitter_ranges(1.5, 0, 0.3, 0.1);
  ASSERT_TRUE(ranges.brightness && ranges.saturation && ranges.hue);
  EXPECT_FALSE(ranges.contrast);
  EXPECT_EQ(*ranges.brightness, (std::array<double, 2>{0.0, 2.5}));  // max(0, 1 - b)
  EXPECT_EQ(*ranges.saturation, (std::array<double, 2>{0.7, 1.3}));
  EXPECT_EQ(*ranges.hue, (std::array<double, 2>{-0.1, 0.1}));
  for (std::uint64_t seed : {1u, 2u, 42u, 1000u}) {
    SampleRandom random(seed), again(seed);
    const ColorJitterParams p = draw_color_jitter(ranges, random);
    std::array<int, 4> order{0, 1, 2, 3};
    for (int i = 3; i > 0; --i) std::swap(order[i], order[again.integer(0, i)]);
    EXPECT_EQ(p.order, order);
    EXPECT_EQ(p.brightness, again.uniform(0.0, 2.5));
    EXPECT_FALSE(p.contrast);
    EXPECT_EQ(p.saturation, again.uniform(0.7, 1.3));
    EXPECT_EQ(p.hue, again.uniform(-0.1, 0.1));
    EXPECT_EQ(random.next(), again.next());  // nothing more drawn
  }
}

Schema image_field(std::vector<std::int64_t> shape, DType dtype = DType::u8) {
  Schema s;
  s.num_samples = 4;
  s.fields = {{"image", FieldKind::fixed, dtype, std::move(shape)}};
  return s;
}

TEST(ColorJitter, InAPipelineTheSameSampleGetsTheSameDrawsAndAnotherEpochOthers) {
  const Schema s = image_field({1, 4, 3});
  SamplePipelines one("image=color_jitter(0.4,0.4,0.4,0.1)", s, 9, {});
  SamplePipelines other("image=color_jitter(0.4,0.4,0.4,0.1)", s, 9, {});
  EXPECT_EQ(one.output().describe_fields(), "image: u8[1,4,3]");
  const auto in = std::as_bytes(std::span(kRgb));
  std::vector<std::byte> a(12), b(12);
  one.run(0, in, 0, 3, a.data());
  other.run(0, in, 0, 3, b.data());
  EXPECT_EQ(a, b);
  bool differs = false;
  for (std::uint64_t epoch = 1; epoch < 8; ++epoch) {
    other.run(0, in, epoch, 3, b.data());
    differs = differs || a != b;
  }
  EXPECT_TRUE(differs);
}

void expect_refused(const std::string& text, const Schema& s, const std::string& want) {
  try {
    SamplePipelines p(text, s, 0, {});
    ADD_FAILURE() << text << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option) << text;
    EXPECT_THAT(e.what(), HasSubstr(want)) << text;
  }
}

TEST(ColorJitter, BadArgumentsAndInputsAreRefusedNamingThem) {
  const Schema s = image_field({4, 4, 3});
  expect_refused("image=color_jitter(0.4,0.4)", s,
                 "'color_jitter(0.4,0.4)': takes (brightness, contrast, saturation) or (brightness, contrast, "
                 "saturation, hue) (got 2 arguments)");
  expect_refused("image=color_jitter(0.4,-1,0.4)", s,
                 "'color_jitter(0.4,-1,0.4)': contrast must be 0 or more (its factor is drawn from "
                 "[max(0, 1 - contrast), 1 + contrast]), not -1");
  expect_refused("image=color_jitter(0.4,0.4,0.4,0.6)", s,
                 "'color_jitter(0.4,0.4,0.4,0.6)': hue must be within [0, 0.5] (its factor is drawn from [-hue, "
                 "hue]), not 0.6");
  expect_refused("image=normalize(0,0,0,1,1,1),color_jitter(0.4,0.4,0.4)", s,
                 "pipeline: field 'image', operation 2: 'color_jitter(0.4,0.4,0.4)' works on u8 images of 1 or 3 "
                 "channels (as torchvision's ColorJitter on uint8), and its input is f32[4,4,3]: put it before "
                 "normalize");
  expect_refused("image=color_jitter(0.4,0.4,0.4)", image_field({4, 4, 4}), "and its input is u8[4,4,4]");
  expect_refused("image=to_chw,color_jitter(0.4,0.4,0.4)", s,
                 "'color_jitter(0.4,0.4,0.4)' works on HWC images: put it before to_chw");
}

}  // namespace
}  // namespace stoker::detail
