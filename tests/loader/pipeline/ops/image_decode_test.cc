// What a hostile image can make a worker spend: scans of a progressive JPEG are limited, warnings
// that mean corruption are errors, an image of more pixels than Options::max_image_pixels is
// refused from its header, and one sample's memory is bounded by docs/pipeline.md's formula and
// given back after an outlier.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <spng.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "formats/image/image_decode.h"
#include "loader/pipeline/pipeline.h"
#include "stoker/error.h"
#include "tests/support/test_data.h"
#include "tests/support/test_images.h"

namespace stoker::test {
namespace {

using detail::OpLimits;
using detail::SamplePipelines;
using ::testing::HasSubstr;
using Bytes = std::vector<std::byte>;

// A 3-component image whose pixels are a function of their position.
std::vector<std::uint8_t> pattern(int h, int w) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>((i * 7 + i / 97) & 0xff);
  return rgb;
}

// A JPEG written by libjpeg: sequential when `scans` is empty, else progressive with that script.
Bytes encode_jpeg(const std::vector<std::uint8_t>& rgb, int h, int w, const std::vector<jpeg_scan_info>& scans) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* out = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  c.image_width = static_cast<JDIMENSION>(w);
  c.image_height = static_cast<JDIMENSION>(h);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  for (int i = 0; i < 3; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;  // 4:4:4
  if (!scans.empty()) {
    c.scan_info = scans.data();
    c.num_scans = static_cast<int>(scans.size());
  }
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < h; ++y) {
    JSAMPROW row = const_cast<JSAMPROW>(rgb.data() + static_cast<std::size_t>(y) * w * 3);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes b(reinterpret_cast<std::byte*>(out), reinterpret_cast<std::byte*>(out) + size);
  std::free(out);
  return b;
}

// A valid progressive script of 1 + 3 * 63 * passes scans: the DC of all components, then every
// AC coefficient of every component alone, sent in `passes` successive-approximation steps.
std::vector<jpeg_scan_info> one_coefficient_per_scan(int passes) {
  std::vector<jpeg_scan_info> scans;
  jpeg_scan_info dc{};
  dc.comps_in_scan = 3;
  for (int i = 0; i < 3; ++i) dc.component_index[i] = i;
  scans.push_back(dc);
  for (int comp = 0; comp < 3; ++comp) {
    for (int k = 1; k < 64; ++k) {
      for (int p = 0; p < passes; ++p) {
        jpeg_scan_info s{};
        s.comps_in_scan = 1;
        s.component_index[0] = comp;
        s.Ss = s.Se = k;
        s.Al = passes - 1 - p;
        s.Ah = p == 0 ? 0 : s.Al + 1;
        scans.push_back(s);
      }
    }
  }
  return scans;
}

// The pipeline "x=decode" run on one sample; the decoded bytes.
Bytes decode(const Bytes& image, int h, int w, OpLimits limits = {}) {
  const Schema s{1, {Field{"x", FieldKind::bytes, DType::u8, {}}}};
  SamplePipelines p(fmt::format("x=decode({},{})", h, w), s, 0, limits);
  Bytes out(static_cast<std::size_t>(h) * w * 3);
  p.run(0, image, 0, 0, out.data());
  return out;
}

TEST(ImageDecode, AProgressiveJpegOfMoreScansThanTheLimitIsRefused) {
  const int h = 16, w = 16;
  const auto rgb = pattern(h, w);
  const Bytes sequential = encode_jpeg(rgb, h, w, {});
  // 379 scans: within the limit, and the same pixels as the sequential file (the same coefficients).
  const auto within = one_coefficient_per_scan(2);
  ASSERT_EQ(within.size(), 379u);
  ASSERT_LT(static_cast<int>(within.size()), formats::kMaxJpegScans);
  EXPECT_EQ(decode(encode_jpeg(rgb, h, w, within), h, w), decode(sequential, h, w));
  // 568 scans: a small file whose every scan is a pass over the whole image, stopped at the limit.
  const auto past = one_coefficient_per_scan(3);
  ASSERT_EQ(past.size(), 568u);
  expect_error(ErrorCode::dataset, [&] { decode(encode_jpeg(rgb, h, w, past), h, w); },
               {"corrupt JPEG: a progressive JPEG of more than 500 scans (the limit)"});
}

// The start of every SOS segment (marker FF DA) of a JPEG.
std::vector<std::size_t> scan_starts(const Bytes& jpeg) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i + 1 < jpeg.size(); ++i) {
    if (jpeg[i] == std::byte{0xff} && jpeg[i + 1] == std::byte{0xda}) at.push_back(i);
  }
  return at;
}

// A scan sent again repeats what the decoder already has ("inconsistent progression", libjpeg's
// warning): the mark of a file built to make it work for nothing, or a damaged one. An error, not a
// warning printed to stderr while every repeated scan is decoded again.
TEST(ImageDecode, AJpegWhoseScansRepeatIsAnError) {
  const int h = 16, w = 16;
  const Bytes good = encode_jpeg(pattern(h, w), h, w, one_coefficient_per_scan(2));
  const auto starts = scan_starts(good);
  ASSERT_GT(starts.size(), 2u);
  // The last scan (up to the end-of-image marker) three more times.
  const std::size_t last = starts.back(), eoi = good.size() - 2;
  Bytes bad(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(eoi));
  for (int i = 0; i < 3; ++i) {
    bad.insert(bad.end(), good.begin() + static_cast<std::ptrdiff_t>(last),
               good.begin() + static_cast<std::ptrdiff_t>(eoi));
  }
  bad.insert(bad.end(), good.end() - 2, good.end());
  expect_error(ErrorCode::dataset, [&] { decode(bad, h, w); },
               {"corrupt JPEG: Inconsistent progression sequence for component 2 coefficient 63"});
}

// CRC-32 (PNG's, ISO 3309), bit by bit: a test's few bytes need no table.
std::uint32_t crc32(const std::byte* p, std::size_t n) {
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= static_cast<std::uint8_t>(p[i]);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

void put_be32(std::byte* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (24 - 8 * i));
}

// A valid 1x1 PNG whose header claims h x w: a decompression bomb of 70 bytes.
Bytes png_claiming(std::uint32_t h, std::uint32_t w) {
  Bytes png = encode_png({1, 2, 3}, 1, 1);
  // Signature (8), then IHDR: length (4), "IHDR" (4), width, height, ..., CRC over type and data.
  put_be32(&png[16], w);
  put_be32(&png[20], h);
  put_be32(&png[29], crc32(&png[12], 17));
  return png;
}

TEST(ImageDecode, AnImageOfMorePixelsThanTheLimitIsRefusedFromItsHeader) {
  const Schema s{1, {Field{"x", FieldKind::bytes, DType::u8, {}}}};
  Bytes out(224 * 224 * 3);
  // The default limit (PIL's): a 70-byte file that claims 10000 x 10000 pixels costs no memory.
  SamplePipelines by_default("x=decode,resize(224,224)", s, 0, {});
  expect_error(ErrorCode::dataset, [&] { by_default.run(0, png_claiming(10000, 10000), 0, 0, out.data()); },
               {"the image is 10000x10000 (height x width), 100000000 pixels, more than the 89478485 allowed: a "
                "decompression bomb, or a dataset of larger images than that (raise Options::max_image_pixels)"});
  // Through a crop, which decodes a region only, the same.
  SamplePipelines cropped("x=decode,center_crop(224)", s, 0, {});
  expect_error(ErrorCode::dataset, [&] { cropped.run(0, png_claiming(10000, 10000), 0, 0, out.data()); },
               {"100000000 pixels, more than the 89478485 allowed"});
  // A limit of the user's: 16 x 16 is 256 pixels.
  const Bytes small = encode_png(pattern(16, 16), 16, 16);
  EXPECT_EQ(decode(small, 16, 16, OpLimits{256}).size(), 16u * 16 * 3);
  expect_error(ErrorCode::dataset, [&] { decode(small, 16, 16, OpLimits{255}); },
               {"the image is 16x16 (height x width), 256 pixels, more than the 255 allowed"});
}

#if defined(__SANITIZE_THREAD__)
constexpr std::uint64_t kShadowFactor = 8;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr std::uint64_t kShadowFactor = 8;
#else
constexpr std::uint64_t kShadowFactor = 1;
#endif
#else
constexpr std::uint64_t kShadowFactor = 1;
#endif

// Peak resident memory (VmHWM) since `reset_peak()`, in bytes.
std::uint64_t peak_rss() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}
bool reset_peak() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  return static_cast<bool>(clear);
}

// The heap the process holds now (whether or not glibc gave freed memory back to the kernel).
std::uint64_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// docs/pipeline.md, "Memory": decode then resize(oh, ow) of an h x w image takes at most
//   3 h w  +  4 c oh ow  +  4 c (w + ow)  +  8 (h + w)  +  the decoder's rows
// bytes beyond the batch, whatever its shape: a tall strip no longer keeps every resized row.
TEST(ImageDecode, ATallImageResizedTakesMemoryOfItsPixelsAndTheOutputNotTheirProduct) {
  const int h = 250'000, w = 8, oh = 224, ow = 224, c = 3;
  const Bytes strip = encode_png(std::vector<std::uint8_t>(static_cast<std::size_t>(h) * w * c, 7), h, w);
  const Schema s{1, {Field{"x", FieldKind::bytes, DType::u8, {}}}};
  SamplePipelines p("x=decode,resize(224,224)", s, 0, {});
  Bytes out(static_cast<std::size_t>(oh) * ow * c);
  if (!reset_peak()) GTEST_SKIP() << "/proc/self/clear_refs cannot reset the peak here";
  const std::uint64_t before = peak_rss();
  p.run(0, strip, 0, 0, out.data());
  const std::uint64_t grew = peak_rss() - before;
  const std::uint64_t formula = 3ull * h * w + 4ull * c * oh * ow + 4ull * c * (w + ow) + 8ull * (h + w);
  // The decoder's own rows and allocator rounding: a few MB. (Keeping every resized row took 670 MB.)
  // ThreadSanitizer keeps shadow memory, resident, for every byte the program touches: several
  // times the program's own.
  EXPECT_LE(grew, (formula + (std::uint64_t{8} << 20)) * kShadowFactor) << "formula " << formula;
  EXPECT_EQ(out, Bytes(out.size(), std::byte{7}));
}

// One outlier does not set a worker's memory for its life: what it took is given back once the
// samples after it need a small part of it.
TEST(ImageDecode, AfterAnOutlierImageTheScratchMemoryIsGivenBack) {
  const Schema s{1, {Field{"x", FieldKind::bytes, DType::u8, {}}}};
  const Bytes small = encode_png(pattern(96, 96), 96, 96);
  const Bytes outlier = encode_png(std::vector<std::uint8_t>(4000ull * 2500 * 3, 9), 4000, 2500);  // 30 MB decoded
  for (const char* pipeline :
       {"x=decode,resize(64,64)", "x=decode,center_crop(64)", "x=decode,random_resized_crop(64)"}) {
    SamplePipelines p(pipeline, s, 0, {});
    Bytes out(64 * 64 * 3);
    p.run(0, small, 0, 0, out.data());
    const std::uint64_t warm = heap_in_use();
    p.run(0, outlier, 0, 1, out.data());
    p.run(0, small, 0, 2, out.data());
    const std::uint64_t after = heap_in_use();
    EXPECT_LT(after, warm + (std::uint64_t{4} << 20)) << pipeline << ": " << warm << " bytes before, " << after;
  }
}

}  // namespace
}  // namespace stoker::test
