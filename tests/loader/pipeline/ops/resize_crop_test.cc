// resize(S) (torchvision's Resize(S): the shorter side to S) and center_crop (its CenterCrop), alone
// and together as the validation transform: sizes, offsets and padding as torchvision computes
// them, the pair run fused equal to the resize run whole and cropped, and resize(S) refused where a
// batch would need one shape; random_resized_crop with flip and to_chw in one pass equal to the four
// run apart.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "formats/image/resize.h"
#include "loader/pipeline/ops/image_ops.h"
#include "loader/pipeline/pipeline.h"
#include "stoker/error.h"
#include "tests/support/test_images.h"

namespace stoker::test {
namespace {

using detail::OpLimits;
using detail::SamplePipelines;
using ::testing::HasSubstr;
using Bytes = std::vector<std::byte>;

std::vector<std::uint8_t> pattern(int h, int w) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>((i * 37 + i / 11) & 0xff);
  return rgb;
}

Schema bytes_field() { return Schema{1, {Field{"x", FieldKind::bytes, DType::u8, {}}}}; }
Schema image_field(int h, int w, DType dtype = DType::u8) {
  return Schema{1, {Field{"x", FieldKind::fixed, dtype, {h, w, 3}}}};
}

// Runs `text` on one sample and returns the field's bytes.
Bytes run(const std::string& text, const Schema& s, std::span<const std::byte> in, const OpLimits& limits = {}) {
  SamplePipelines p(text, s, 0, limits);
  Bytes out(p.output().fields[0].bytes_per_sample());
  p.run(0, in, 0, 0, out.data());
  return out;
}

// torchvision.transforms.v2.functional.center_crop on an HWC image of `px` bytes a pixel: zero
// padding of (crop - size) // 2 before and (crop - size + 1) // 2 after where the image is smaller,
// then the crop at int(round((size - crop) / 2.0)) of the padded image (Python rounds half to even).
Bytes torchvision_center_crop(const Bytes& image, int h, int w, std::size_t px, int ch, int cw) {
  const int top_pad = ch > h ? (ch - h) / 2 : 0, left_pad = cw > w ? (cw - w) / 2 : 0;
  const int ph = ch > h ? ch : h, pw = cw > w ? cw : w;
  Bytes padded(static_cast<std::size_t>(ph) * pw * px);
  for (int y = 0; y < h; ++y) {
    std::memcpy(&padded[(static_cast<std::size_t>(y + top_pad) * pw + left_pad) * px],
                &image[static_cast<std::size_t>(y) * w * px], static_cast<std::size_t>(w) * px);
  }
  const auto python_round_half = [](int twice) {  // round(twice / 2.0), half to even
    return twice % 2 == 0 ? twice / 2 : ((twice / 2) % 2 == 0 ? twice / 2 : twice / 2 + 1);
  };
  const int top = python_round_half(ph - ch), left = python_round_half(pw - cw);
  Bytes out(static_cast<std::size_t>(ch) * cw * px);
  for (int y = 0; y < ch; ++y) {
    std::memcpy(&out[static_cast<std::size_t>(y) * cw * px],
                &padded[(static_cast<std::size_t>(top + y) * pw + left) * px], static_cast<std::size_t>(cw) * px);
  }
  return out;
}

struct Shape {
  int h, w;
};

TEST(CenterCrop, OffsetsRoundHalfToEvenAndPaddingSplitsAsTorchvisionsDoes) {
  // Differences of 1, 3, 5 (round(0.5) = 0, round(1.5) = 2, round(2.5) = 2), padding odd and even,
  // padding in one direction while cropping in the other.
  const Shape images[] = {{9, 7}, {5, 6}, {6, 10}, {10, 5}, {8, 8}};
  const Shape crops[] = {{4, 4}, {8, 9}, {9, 4}, {3, 8}, {8, 8}, {1, 1}};
  for (const Shape& im : images) {
    const std::vector<std::uint8_t> rgb = pattern(im.h, im.w);
    const Bytes pixels(reinterpret_cast<const std::byte*>(rgb.data()),
                       reinterpret_cast<const std::byte*>(rgb.data()) + rgb.size());
    const Bytes png = encode_png(rgb, im.h, im.w);
    for (const Shape& c : crops) {
      const std::string op = "center_crop(" + std::to_string(c.h) + "," + std::to_string(c.w) + ")";
      const Bytes want = torchvision_center_crop(pixels, im.h, im.w, 3, c.h, c.w);
      // On an array, and after decode (which decodes the region only).
      EXPECT_EQ(run("x=" + op, image_field(im.h, im.w), pixels), want) << im.h << "x" << im.w << " " << op;
      EXPECT_EQ(run("x=decode," + op, bytes_field(), png), want) << im.h << "x" << im.w << " decode," << op;
    }
  }
}

struct Sized {
  int h, w, size, out_h, out_w;
};
// Python's int(S * long / short), worked by hand: 256 * 500 / 333 = 384.38 -> 384,
// 224 * 640 / 480 = 298.67 -> 298, 5 * 7 / 3 = 11.67 -> 11, 33 * 100 / 99 = 33.33 -> 33.
const Sized kSizes[] = {{333, 500, 256, 256, 384}, {500, 333, 256, 384, 256}, {480, 640, 224, 224, 298},
                        {7, 3, 5, 11, 5},          {3, 7, 6, 6, 14},          {10, 10, 4, 4, 4},
                        {99, 100, 33, 33, 33},     {1, 3, 2, 2, 6},           {40, 30, 30, 40, 30}};

TEST(ResizeShorterSide, TheShorterSideBecomesSAndTheLongerIntOfSTimesLongOverShort) {
  for (const Sized& k : kSizes) {
    const std::string resize = "resize(" + std::to_string(k.size) + ")";
    // A fixed input: the output size is known when the pipeline is built.
    SamplePipelines fixed("x=" + resize, image_field(k.h, k.w), 0, {});
    EXPECT_EQ(fixed.output().fields[0].shape, (std::vector<std::int64_t>{k.out_h, k.out_w, 3})) << k.h << "x" << k.w;
    // Decoded images: each its own; a crop of exactly that size keeps all of it, which is resize(H,W).
    const std::vector<std::uint8_t> rgb = pattern(k.h, k.w);
    const Bytes png = encode_png(rgb, k.h, k.w);
    const std::string sized = std::to_string(k.out_h) + "," + std::to_string(k.out_w);
    EXPECT_EQ(run("x=decode," + resize + ",center_crop(" + sized + ")", bytes_field(), png),
              run("x=decode,resize(" + sized + ")", bytes_field(), png))
        << k.h << "x" << k.w;
  }
}

// The resize of `rgb` to oh x ow, whole, by the resizer.
Bytes resized_whole(const std::vector<std::uint8_t>& rgb, int h, int w, int oh, int ow) {
  Bytes out(static_cast<std::size_t>(oh) * ow * 3);
  formats::Resizer r;
  r.run(rgb.data(), h, w, 3, static_cast<std::size_t>(w) * 3, reinterpret_cast<std::uint8_t*>(out.data()), oh, ow);
  return out;
}

TEST(ResizeShorterSide, ThenCenterCropEqualsTheResizeMadeWholeThenCroppedAsTorchvision) {
  struct Case {
    int h, w, size, ch, cw;
  };
  // Cropping inside, padding in one direction or both, an odd padding.
  const Case cases[] = {{60, 90, 32, 28, 28}, {90, 60, 32, 28, 30}, {37, 101, 20, 24, 24},
                        {50, 50, 16, 17, 40}, {45, 80, 24, 24, 42}, {80, 45, 24, 43, 24}};
  for (const Case& k : cases) {
    const std::vector<std::uint8_t> rgb = pattern(k.h, k.w);
    const Bytes pixels(reinterpret_cast<const std::byte*>(rgb.data()),
                       reinterpret_cast<const std::byte*>(rgb.data()) + rgb.size());
    const Bytes png = encode_png(rgb, k.h, k.w);
    const int shorter = std::min(k.h, k.w), longer = std::max(k.h, k.w);
    const int along = static_cast<int>(static_cast<double>(k.size * longer) / shorter);
    const int oh = k.w <= k.h ? along : k.size, ow = k.w <= k.h ? k.size : along;
    const Bytes want = torchvision_center_crop(resized_whole(rgb, k.h, k.w, oh, ow), oh, ow, 3, k.ch, k.cw);
    const std::string ops =
        "resize(" + std::to_string(k.size) + "),center_crop(" + std::to_string(k.ch) + "," + std::to_string(k.cw) + ")";
    const std::string apart = "resize(" + std::to_string(k.size) + "),flip(0),center_crop(" + std::to_string(k.ch) +
                              "," + std::to_string(k.cw) + ")";  // flip(0) never flips: the two run apart
    EXPECT_EQ(run("x=decode," + ops, bytes_field(), png), want) << k.h << "x" << k.w << " " << ops;
    EXPECT_EQ(run("x=decode," + apart, bytes_field(), png), want) << k.h << "x" << k.w << " " << apart;
    EXPECT_EQ(run("x=" + ops, image_field(k.h, k.w), pixels), want) << k.h << "x" << k.w << " " << ops;
  }
  // f32 images the same way: fused and apart agree value for value.
  const int h = 33, w = 58;
  std::vector<float> values(static_cast<std::size_t>(h) * w * 3);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 251) * 0.37f - 20.0f;
  const std::span<const std::byte> in = std::as_bytes(std::span(values));
  EXPECT_EQ(run("x=resize(20),center_crop(22,30)", image_field(h, w, DType::f32), in),
            run("x=resize(20),flip(0),center_crop(22,30)", image_field(h, w, DType::f32), in));
}

TEST(RandomResizedCrop, WithFlipAndToChwItRunsAsOnePassThatEqualsTheFourRunApart) {
  // PNG images (decoding a region of one is decoding it whole and cutting): decode(H,W) declares
  // the size, so the four run as two pairs, one after the other; plain decode fuses all four. The
  // same draws in the same order (the region, then the flip), so the same samples, flipped or not.
  const int h = 150, w = 200;
  const std::vector<std::uint8_t> rgb = pattern(h, w);
  const Bytes png = encode_png(rgb, h, w);
  const std::string tail = "random_resized_crop(64,48),flip,to_chw";
  SamplePipelines fused("x=decode," + tail, bytes_field(), 7, {});
  SamplePipelines apart("x=decode(150,200)," + tail, bytes_field(), 7, {});
  EXPECT_EQ(fused.stage_names(), std::vector<std::string>{"x: decode+random_resized_crop(64,48)+flip+to_chw"});
  EXPECT_EQ(apart.stage_names(),
            (std::vector<std::string>{"x: decode(150,200)+random_resized_crop(64,48)", "x: flip+to_chw"}));
  const std::size_t bytes = fused.output().fields[0].bytes_per_sample();
  ASSERT_EQ(bytes, 3u * 64 * 48);
  int mirrored = 0;
  for (std::uint64_t i = 0; i < 40; ++i) {
    Bytes a(bytes), b(bytes);
    fused.run(0, png, 1, i, a.data());
    apart.run(0, png, 1, i, b.data());
    ASSERT_EQ(a, b) << "sample " << i;
    SampleRandom random = detail::sample_random(7, 1, i, 0);
    (void)detail::random_resized_crop_region(h, w, random);
    mirrored += random.uniform() < 0.5;
  }
  EXPECT_GT(mirrored, 5);  // both ways were compared
  EXPECT_LT(mirrored, 35);
}

void expect_error(ErrorCode code, const std::function<void()>& f, const std::string& want) {
  try {
    f();
    ADD_FAILURE() << "no error; wanted " << want;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code);
    EXPECT_THAT(e.what(), HasSubstr(want));
  }
}

TEST(ResizeShorterSide, AsTheLastSizeOfAPipelineItIsRefusedNamingIt) {
  const std::string why =
      "'resize(64)' keeps each image's aspect ratio, so the height and width it makes differ per sample, and the "
      "pipeline ends in u8[?,?,3] while a batch holds one shape: follow it with an operation of a fixed output size "
      "(center_crop(H,W), as torchvision's Resize(S) then CenterCrop), or give both sides (resize(H,W))";
  const std::pair<const char*, const char*> refused[] = {
      {"x=decode,resize(64)", "2"}, {"x=decode,resize(64),flip", "2"}, {"x=decode,flip,resize(64),flip(0.3)", "3"}};
  for (const auto& [text, position] : refused) {
    expect_error(
        ErrorCode::invalid_option, [&] { SamplePipelines p(text, bytes_field(), 0, {}); },
        std::string("pipeline: field 'x', operation ") + position + ": " + why);
  }
  // A size fixed after it, or an input of one size, is a pipeline like any other.
  EXPECT_EQ(
      SamplePipelines("x=decode,resize(64),flip,center_crop(56)", bytes_field(), 0, {}).output().describe_fields(),
      "x: u8[56,56,3]");
  EXPECT_EQ(SamplePipelines("x=decode(30,40),resize(15)", bytes_field(), 0, {}).output().describe_fields(),
            "x: u8[15,20,3]");
}

TEST(ResizeShorterSide, AnImageWhoseResizeWouldPassThePixelLimitIsTheSamplesError) {
  // A 2 x 400 strip: its shorter side to 64 makes it 64 x 12800, 819200 pixels.
  const Bytes strip = encode_png(pattern(2, 400), 2, 400);
  const std::string want =
      "'resize(64)' of a 2x400 image (height x width) makes it 64x12800, 819200 pixels, more than the 100000 allowed "
      "(Options::max_image_pixels): an image of extreme aspect ratio";
  // Whether the crop runs fused (only the crop is resized) or not, the same samples are refused.
  for (const char* text : {"x=decode,resize(64),center_crop(32)", "x=decode,resize(64),flip,center_crop(32)"}) {
    expect_error(
        ErrorCode::dataset, [&] { run(text, bytes_field(), strip, OpLimits{100000}); }, want);
    EXPECT_EQ(run(text, bytes_field(), strip, OpLimits{819200}).size(), 32u * 32 * 3) << text;
  }
}

}  // namespace
}  // namespace stoker::test
