// 4-component JPEGs (CMYK, YCCK) decode to RGB as PIL's Image.open(f).convert("RGB") does: libjpeg's
// CMYK output read as Adobe's inverted CMYK and converted by PIL's formula, whole, as a region and
// DCT-scaled. tests/tools/image_check.py holds the same against PIL itself.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "formats/image/image_decode.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

using Bytes = std::vector<std::byte>;
using ::testing::HasSubstr;

struct Stored {
  J_COLOR_SPACE space = JCS_CMYK;  // JCS_CMYK or JCS_YCCK
  bool adobe_marker = true;
  bool subsampled = false;  // YCCK: 4:2:0 chroma
  bool progressive = false;
  int quality = 90;
};

// A JPEG written by libjpeg from `pixels` (h x w x components, in `in_space`), stored as `s` says.
Bytes encode(const std::vector<std::uint8_t>& pixels, int h, int w, int components, J_COLOR_SPACE in_space,
             const Stored& s) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = components;
  c.in_color_space = in_space;
  jpeg_set_defaults(&c);
  if (in_space == JCS_CMYK) jpeg_set_colorspace(&c, s.space);  // writes the Adobe marker
  c.write_Adobe_marker = s.adobe_marker ? TRUE : FALSE;
  jpeg_set_quality(&c, s.quality, TRUE);
  if (s.subsampled) {
    c.comp_info[0].h_samp_factor = c.comp_info[0].v_samp_factor = 2;
    c.comp_info[3].h_samp_factor = c.comp_info[3].v_samp_factor = 2;
  }
  if (s.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < h; ++y) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels.data() + static_cast<std::size_t>(y) * w * components);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes b(reinterpret_cast<std::byte*>(out), reinterpret_cast<std::byte*>(out) + size);
  std::free(out);
  return b;
}

// PIL, transcribed: JpegImagePlugin reads a 4-component JPEG as "CMYK;I" (libjpeg's CMYK output,
// every byte inverted), and libImaging/Convert.c's cmyk2rgb makes RGB of it.
#define MULDIV255(a, b, tmp) (tmp = (a) * (b) + 128, ((((tmp) >> 8) + (tmp)) >> 8))
#define CLIP8(v) ((v) <= 0 ? 0 : (v) < 256 ? (v) : 255)
std::vector<std::uint8_t> pil_rgb_of_libjpeg_cmyk(const std::vector<std::uint8_t>& cmyk) {
  std::vector<std::uint8_t> rgb;
  for (std::size_t i = 0; i < cmyk.size(); i += 4) {
    const int in[4] = {255 - cmyk[i], 255 - cmyk[i + 1], 255 - cmyk[i + 2], 255 - cmyk[i + 3]};
    int tmp = 0;
    const int nk = 255 - in[3];
    for (int ch = 0; ch < 3; ++ch) rgb.push_back(static_cast<std::uint8_t>(CLIP8(nk - MULDIV255(in[ch], nk, tmp))));
  }
  return rgb;
}
#undef MULDIV255
#undef CLIP8

// libjpeg's own decode to CMYK at scale num/8, through PIL's conversion: the reference.
struct Reference {
  int h = 0, w = 0;
  std::vector<std::uint8_t> rgb;
};
Reference reference(const Bytes& jpeg, int num) {
  jpeg_decompress_struct d;
  jpeg_error_mgr err;
  d.err = jpeg_std_error(&err);
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, reinterpret_cast<const unsigned char*>(jpeg.data()), jpeg.size());
  jpeg_read_header(&d, TRUE);
  d.out_color_space = JCS_CMYK;
  d.scale_num = static_cast<unsigned>(num);
  d.scale_denom = 8;
  jpeg_start_decompress(&d);
  std::vector<std::uint8_t> cmyk(static_cast<std::size_t>(d.output_width) * d.output_height * 4);
  while (d.output_scanline < d.output_height) {
    JSAMPROW row = cmyk.data() + static_cast<std::size_t>(d.output_scanline) * d.output_width * 4;
    jpeg_read_scanlines(&d, &row, 1);
  }
  Reference r{static_cast<int>(d.output_height), static_cast<int>(d.output_width), pil_rgb_of_libjpeg_cmyk(cmyk)};
  jpeg_finish_decompress(&d);
  jpeg_destroy_decompress(&d);
  return r;
}

std::vector<std::uint8_t> cmyk_pattern(int h, int w) {
  std::vector<std::uint8_t> p(static_cast<std::size_t>(h) * w * 4);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      std::uint8_t* px = &p[(static_cast<std::size_t>(y) * w + x) * 4];
      px[0] = static_cast<std::uint8_t>(x * 255 / w);
      px[1] = static_cast<std::uint8_t>(y * 255 / h);
      px[2] = static_cast<std::uint8_t>((x * 7 + y * 3) & 0xff);
      px[3] = static_cast<std::uint8_t>(255 - ((x + y) * 2 & 0x7f));
    }
  }
  return p;
}

// stoker's decode of `region`, scaled as plan_decode chooses for an output of min_w x min_h.
std::vector<std::uint8_t> decode(const Bytes& jpeg, const Region& region, int min_w, int min_h, DecodePlan* plan_out) {
  const ImageInfo info = image_info(jpeg, 1u << 30);
  const DecodePlan plan = plan_decode(info, region, min_w, min_h);
  std::vector<std::byte> out(static_cast<std::size_t>(plan.width) * plan.height * 3), scratch;
  decode_region(jpeg, info, region, plan, out.data(), scratch);
  if (plan_out) *plan_out = plan;
  return {reinterpret_cast<const std::uint8_t*>(out.data()),
          reinterpret_cast<const std::uint8_t*>(out.data()) + out.size()};
}

std::vector<std::uint8_t> whole(const Bytes& jpeg) {
  const ImageInfo info = image_info(jpeg, 1u << 30);
  return decode(jpeg, {0, 0, info.width, info.height}, 0, 0, nullptr);
}

TEST(CmykJpeg, AdobesInvertedCmykBecomesTheRgbPilGives) {
  // Uniform images at quality 100 come back exactly. Adobe's convention stores 255 - ink: raw
  // (255, 255, 255, 255) is no ink (white), raw cyan 0 is full cyan, raw black 0 is black; and
  // (128, 64, 255, 200) is, by PIL's arithmetic, (100, 50, 200).
  const struct {
    std::uint8_t c, m, y, k, r, g, b;
  } cases[] = {{255, 255, 255, 255, 255, 255, 255},
               {0, 255, 255, 255, 0, 255, 255},
               {255, 255, 255, 0, 0, 0, 0},
               {128, 64, 255, 200, 100, 50, 200}};
  for (const auto& t : cases) {
    std::vector<std::uint8_t> px;
    for (int i = 0; i < 16 * 16; ++i) px.insert(px.end(), {t.c, t.m, t.y, t.k});
    const Bytes jpeg = encode(px, 16, 16, 4, JCS_CMYK, {JCS_CMYK, true, false, false, 100});
    const std::vector<std::uint8_t> rgb = whole(jpeg);
    ASSERT_EQ(rgb.size(), 16u * 16 * 3);
    EXPECT_EQ((std::vector<int>{rgb[0], rgb[1], rgb[2]}), (std::vector<int>{t.r, t.g, t.b}))
        << "raw CMYK " << int(t.c) << "," << int(t.m) << "," << int(t.y) << "," << int(t.k);
    EXPECT_EQ((std::vector<int>{rgb[rgb.size() - 3], rgb[rgb.size() - 2], rgb[rgb.size() - 1]}),
              (std::vector<int>{t.r, t.g, t.b}));
  }
}

TEST(CmykJpeg, CmykWithOrWithoutTheAdobeMarkerYcckAndProgressiveDecodeAsPilDoes) {
  const int h = 37, w = 53;
  const std::vector<std::uint8_t> px = cmyk_pattern(h, w);
  const struct {
    const char* what;
    Stored stored;
  } kinds[] = {{"Adobe CMYK", {JCS_CMYK, true, false, false, 90}},
               {"CMYK without the Adobe marker", {JCS_CMYK, false, false, false, 90}},
               {"YCCK 4:2:0", {JCS_YCCK, true, true, false, 85}},
               {"progressive CMYK", {JCS_CMYK, true, false, true, 90}},
               {"progressive YCCK 4:2:0", {JCS_YCCK, true, true, true, 80}}};
  for (const auto& k : kinds) {
    const Bytes jpeg = encode(px, h, w, 4, JCS_CMYK, k.stored);
    const Reference ref = reference(jpeg, 8);
    EXPECT_EQ(whole(jpeg), ref.rgb) << k.what;
  }
}

TEST(CmykJpeg, ARegionAndADctScaledRegionEqualTheFullDecodeAtThatScale) {
  const int h = 150, w = 230;
  const Bytes jpeg = encode(cmyk_pattern(h, w), h, w, 4, JCS_CMYK, {JCS_YCCK, true, true, false, 90});
  const Region regions[] = {{0, 0, w, h}, {37, 21, 120, 90}, {101, 59, 129, 91}, {5, 3, 17, 11}};
  for (const Region& r : regions) {
    // Outputs that give 8/8 (none), 4/8, 2/8 and 1/8 where the region allows.
    for (int out : {0, r.width / 2, r.width / 4, r.width / 8}) {
      DecodePlan plan;
      const std::vector<std::uint8_t> got =
          decode(jpeg, r, out, out ? std::max(1, r.height * out / r.width) : 0, &plan);
      const Reference ref = reference(jpeg, plan.scale_num);
      const int x0 = r.x * plan.scale_num / 8, y0 = r.y * plan.scale_num / 8;
      std::vector<std::uint8_t> want;
      for (int y = y0; y < y0 + plan.height; ++y) {
        const auto* row = &ref.rgb[(static_cast<std::size_t>(y) * ref.w + x0) * 3];
        want.insert(want.end(), row, row + static_cast<std::size_t>(plan.width) * 3);
      }
      EXPECT_EQ(got, want) << "region " << r.x << "," << r.y << " " << r.width << "x" << r.height << " at "
                           << plan.scale_num << "/8";
    }
  }
}

TEST(CmykJpeg, AJpegOfTwoComponentsIsUnsupportedNotCorrupt) {
  std::vector<std::uint8_t> px(16 * 16 * 2, 100);
  const Bytes jpeg = encode(px, 16, 16, 2, JCS_UNKNOWN, {});
  try {
    whole(jpeg);
    FAIL() << "decoded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::dataset);
    EXPECT_THAT(e.what(), HasSubstr("unsupported JPEG: a JPEG of 2 colour components in no colour space that "
                                    "converts to RGB (greyscale, YCbCr, RGB, CMYK or YCCK)"));
  }
}

}  // namespace
}  // namespace stoker::formats
