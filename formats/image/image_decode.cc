#include "formats/image/image_decode.h"

#include <fmt/format.h>
#include <spng.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

// jpeglib.h needs FILE and size_t declared first; jerror.h, jpeglib.h's configuration.
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "base/option_spelling.h"
#include "base/scratch.h"
#include "stoker/error.h"
#include "stoker/schema.h"

namespace stoker::formats {
namespace {

// The most pixels an image may have: its RGB bytes stay within a sample's limit.
constexpr std::uint64_t kMaxPixels = kMaxSampleBytes / 3;

// What libjpeg may allocate for an image's whole-image buffers: a progressive JPEG keeps every
// DCT coefficient (2 bytes) of each full-resolution component, 6 bytes a pixel at most for a
// YCbCr, RGB or greyscale image, 8 for a CMYK or YCCK one (four components); and a little for the
// rest.
constexpr std::uint64_t kJpegCoefficientBytes = 2;
constexpr std::uint64_t kJpegFixedBytes = std::uint64_t{32} << 20;

// libjpeg reports errors by calling error_exit, which must not return: it longjmps back to the
// setjmp in the function that called libjpeg. That function and every libjpeg frame in between
// hold no C++ object with a destructor, so the jump skips nothing (the rule TurboJPEG follows).
struct JpegErrors {
  jpeg_error_mgr mgr;  // first: libjpeg's err pointer is this struct's address
  jpeg_progress_mgr progress;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_jpeg_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings that mean the image is damaged are errors: a truncated file must not become a grey
// bottom half, nor a scan that repeats what earlier ones sent (an inconsistent progression, the
// mark of a file built to make the decoder work) be decoded again. Other warnings (extraneous
// bytes between markers, which cameras write) are ignored, as PIL does.
void on_jpeg_message(j_common_ptr c, int level) {
  if (level >= 0) return;
  switch (c->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION:
#if JPEG_LIB_VERSION >= 70 || defined(D_ARITH_CODING_SUPPORTED)
    case JWRN_ARITH_BAD_CODE:
#endif
    case JWRN_HUFF_BAD_CODE: on_jpeg_error(c); break;
    default: break;
  }
}

// Called by libjpeg as it reads: each scan of a progressive JPEG costs a pass over the whole
// image's coefficients, so a small file of thousands of scans costs a minute; past the limit the
// decode stops.
void on_jpeg_progress(j_common_ptr c) {
  if (!c->is_decompressor) return;
  const int scan = reinterpret_cast<j_decompress_ptr>(c)->input_scan_number;
  if (scan > kMaxJpegScans) {
    auto* e = reinterpret_cast<JpegErrors*>(c->err);
    std::snprintf(e->message, sizeof e->message, "a progressive JPEG of more than %d scans (the limit)", kMaxJpegScans);
    std::longjmp(e->jump, 1);
  }
}

struct JpegRequest {
  const unsigned char* data;
  unsigned long size;
  int scale_num;  // of 8
  // The region in output (scaled) pixels, and the larger one decoded around it (a margin gives the
  // region's edge pixels their neighbours, so that fancy upsampling makes them as a full decode does).
  unsigned x, y, width, height;
  unsigned decode_x, decode_y, decode_width, decode_height;
  unsigned char* out;         // height x width x 3
  unsigned char* row;         // one scaled row, output_width x 4 (CMYK) or x 3
  unsigned long long pixels;  // the image's: what libjpeg may allocate for its buffers
};

// PIL's CMYK -> RGB (libImaging/Convert.c, cmyk2rgb) of the inverted CMYK that libjpeg gives for
// a CMYK or YCCK JPEG (PIL reads every 4-component JPEG with raw mode "CMYK;I", Adobe's
// convention): with c' = 255 - c and k' = 255 - k, R = clip(255 - k' - (c' (255 - k') + 128) / 255)
// where the division is PIL's MULDIV255, ((t >> 8) + t) >> 8. Byte for byte what
// Image.open(f).convert("RGB") gives.
inline unsigned char pil_cmyk_channel(unsigned ink, unsigned k) {
  const int nk = static_cast<int>(k);  // 255 - (255 - k)
  const int t = static_cast<int>(255 - ink) * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<unsigned char>(v <= 0 ? 0 : v < 256 ? v : 255);
}

void cmyk_to_rgb(const unsigned char* cmyk, unsigned char* rgb, unsigned n) {
  for (unsigned x = 0; x < n; ++x, cmyk += 4, rgb += 3) {
    rgb[0] = pil_cmyk_channel(cmyk[0], cmyk[3]);
    rgb[1] = pil_cmyk_channel(cmyk[1], cmyk[3]);
    rgb[2] = pil_cmyk_channel(cmyk[2], cmyk[3]);
  }
}

void use_errors(jpeg_decompress_struct& cinfo, JpegErrors* err) {
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = on_jpeg_error;
  err->mgr.emit_message = on_jpeg_message;
  err->progress.progress_monitor = on_jpeg_progress;
}

// Header only: 0 on success. C-style: see JpegErrors.
int jpeg_header(const unsigned char* data, unsigned long size, int* width, int* height, JpegErrors* err) {
  jpeg_decompress_struct cinfo;
  use_errors(cinfo, err);
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, size);
  jpeg_read_header(&cinfo, TRUE);
  *width = static_cast<int>(cinfo.image_width);
  *height = static_cast<int>(cinfo.image_height);
  jpeg_destroy_decompress(&cinfo);
  return 0;
}

// The decode: 0 on success, -1 for a corrupt image, -2 for one of a colour space without an RGB
// conversion. C-style: see JpegErrors.
int jpeg_decode(const JpegRequest* r, JpegErrors* err) {
  jpeg_decompress_struct cinfo;
  use_errors(cinfo, err);
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &err->progress;
  jpeg_mem_src(&cinfo, r->data, r->size);
  jpeg_read_header(&cinfo, TRUE);
  // libjpeg-turbo converts greyscale, YCbCr and RGB to RGB itself; CMYK and YCCK it gives as CMYK
  // (YCCK converted), which PIL's formula turns into RGB row by row. Anything else (2 components,
  // or 3 or 4 in a colour space libjpeg cannot tell) neither it nor PIL reads.
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  if (!cmyk && cinfo.jpeg_color_space != JCS_GRAYSCALE && cinfo.jpeg_color_space != JCS_YCbCr &&
      cinfo.jpeg_color_space != JCS_RGB) {
    std::snprintf(err->message, sizeof err->message,
                  "a JPEG of %d colour components in no colour space that converts to RGB (greyscale, YCbCr, RGB, "
                  "CMYK or YCCK)",
                  cinfo.num_components);
    jpeg_destroy_decompress(&cinfo);
    return -2;
  }
  // Bounds the whole-image buffers (a progressive JPEG's coefficients) by the components the
  // colour space has: a JPEG of more is refused rather than given memory its pixel count does not
  // show.
  cinfo.mem->max_memory_to_use =
      static_cast<long>(kJpegCoefficientBytes * (cmyk ? 4 : 3) * r->pixels + kJpegFixedBytes);
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.scale_num = static_cast<unsigned>(r->scale_num);
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);
  JDIMENSION xoff = r->decode_x, cwidth = r->decode_width;
  if (xoff != 0 || cwidth != cinfo.output_width) jpeg_crop_scanline(&cinfo, &xoff, &cwidth);  // widens to iMCUs
  const unsigned skip_x = r->x - xoff;
  if (r->decode_y > 0) jpeg_skip_scanlines(&cinfo, r->decode_y);
  for (unsigned y = r->decode_y; y < r->y + r->height; ++y) {
    JSAMPROW row = r->row;
    if (jpeg_read_scanlines(&cinfo, &row, 1) != 1) {
      std::snprintf(err->message, sizeof err->message, "the image ends at row %u", y);
      jpeg_destroy_decompress(&cinfo);
      return -1;
    }
    if (y < r->y) continue;  // the margin above
    unsigned char* out = r->out + static_cast<std::size_t>(y - r->y) * r->width * 3;
    if (cmyk) {
      cmyk_to_rgb(r->row + static_cast<std::size_t>(skip_x) * 4, out, r->width);
    } else {
      std::memcpy(out, r->row + static_cast<std::size_t>(skip_x) * 3, static_cast<std::size_t>(r->width) * 3);
    }
  }
  // The rows below the region are never decoded.
  jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return 0;
}

unsigned scaled(unsigned v, int num) { return (v * static_cast<unsigned>(num) + 7) / 8; }

struct SpngFree {
  void operator()(spng_ctx* c) const noexcept { spng_ctx_free(c); }
};
using SpngCtx = std::unique_ptr<spng_ctx, SpngFree>;

SpngCtx open_png(std::span<const std::byte> data) {
  SpngCtx ctx(spng_ctx_new(0));
  if (!ctx) throw Error(ErrorCode::io, "libspng: cannot allocate a decoder: out of memory");
  // No PNG may decode to more than a sample may hold, nor keep huge ancillary chunks.
  spng_set_image_limits(ctx.get(), 1u << 20, 1u << 20);
  spng_set_chunk_limits(ctx.get(), 64u << 20, 64u << 20);
  spng_set_crc_action(ctx.get(), SPNG_CRC_ERROR, SPNG_CRC_ERROR);
  if (int rc = spng_set_png_buffer(ctx.get(), data.data(), data.size())) {
    throw Error(ErrorCode::dataset, fmt::format("PNG: {}", spng_strerror(rc)));
  }
  return ctx;
}

}  // namespace

ImageInfo image_info(std::span<const std::byte> data, std::uint64_t max_pixels) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  ImageInfo info;
  if (data.size() >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) {
    JpegErrors err;
    if (jpeg_header(p, data.size(), &info.width, &info.height, &err) != 0) {
      throw Error(ErrorCode::dataset, fmt::format("corrupt JPEG header: {}", err.message));
    }
  } else if (data.size() >= 8 && std::memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) {
    info.kind = ImageInfo::Kind::png;
    SpngCtx ctx = open_png(data);
    spng_ihdr ihdr;
    if (int rc = spng_get_ihdr(ctx.get(), &ihdr))
      throw Error(ErrorCode::dataset, fmt::format("corrupt PNG header: {}", spng_strerror(rc)));
    info.width = static_cast<int>(ihdr.width);
    info.height = static_cast<int>(ihdr.height);
  } else {
    std::string start;
    for (std::size_t i = 0; i < std::min<std::size_t>(data.size(), 8); ++i) start += fmt::format("{:02x}", p[i]);
    throw Error(ErrorCode::dataset, fmt::format("not a JPEG or PNG image ({} bytes, starting {})", data.size(),
                                                data.empty() ? "with nothing" : start));
  }
  if (info.width <= 0 || info.height <= 0 ||
      static_cast<std::uint64_t>(info.width) * static_cast<std::uint64_t>(info.height) > kMaxPixels) {
    throw Error(ErrorCode::dataset,
                fmt::format("image of {}x{} pixels: more than a sample may hold ({} bytes, kMaxSampleBytes)",
                            info.width, info.height, kMaxSampleBytes));
  }
  const std::uint64_t pixels = static_cast<std::uint64_t>(info.width) * static_cast<std::uint64_t>(info.height);
  if (pixels > max_pixels) {
    throw Error(ErrorCode::dataset,
                fmt::format("the image is {}x{} (height x width), {} pixels, more than the {} allowed: a "
                            "decompression bomb, or a dataset of larger images than that (raise {})",
                            info.height, info.width, pixels, max_pixels, detail::option_name("max_image_pixels")));
  }
  return info;
}

DecodePlan plan_decode(const ImageInfo& info, const Region& region, int min_width, int min_height) {
  if (info.kind == ImageInfo::Kind::png) return {8, region.width, region.height};
  // The smallest of 1/8, 2/8, 4/8 at which the region still covers what it will be resized to:
  // libjpeg-turbo has SIMD inverse DCTs for those scales (and 8/8) only; the others are slower
  // than decoding in full and resizing a little more.
  int num = 8;
  if (min_width > 0 && min_height > 0) {
    while (num > 1 && region.width * (num / 2) / 8 >= min_width && region.height * (num / 2) / 8 >= min_height) {
      num /= 2;
    }
  }
  const unsigned full_w = scaled(static_cast<unsigned>(info.width), num);
  const unsigned full_h = scaled(static_cast<unsigned>(info.height), num);
  const unsigned x = static_cast<unsigned>(region.x) * num / 8;
  const unsigned y = static_cast<unsigned>(region.y) * num / 8;
  const unsigned w = std::min(scaled(static_cast<unsigned>(region.x + region.width), num), full_w) - x;
  const unsigned h = std::min(scaled(static_cast<unsigned>(region.y + region.height), num), full_h) - y;
  return {num, static_cast<int>(w), static_cast<int>(h)};
}

void decode_region(std::span<const std::byte> data, const ImageInfo& info, const Region& region, const DecodePlan& plan,
                   std::byte* out, std::vector<std::byte>& scratch) {
  if (info.kind == ImageInfo::Kind::png) {
    SpngCtx ctx = open_png(data);
    spng_ihdr ihdr;
    if (int rc = spng_get_ihdr(ctx.get(), &ihdr))
      throw Error(ErrorCode::dataset, fmt::format("corrupt PNG header: {}", spng_strerror(rc)));
    std::size_t size = 0;
    if (int rc = spng_decoded_image_size(ctx.get(), SPNG_FMT_RGB8, &size)) {
      throw Error(ErrorCode::dataset, fmt::format("PNG: {}", spng_strerror(rc)));
    }
    const std::size_t row = static_cast<std::size_t>(region.width) * 3;
    const bool whole = region.x == 0 && region.y == 0 && region.width == info.width && region.height == info.height;
    if (ihdr.interlace_method != SPNG_INTERLACE_NONE) {
      // Interlaced: every pass covers the whole image, so it is decoded whole (straight into `out`
      // when the region is the image).
      std::byte* image = out;
      if (!whole) {
        detail::fit_scratch(scratch, size);
        image = scratch.data();
      }
      if (int rc = spng_decode_image(ctx.get(), image, size, SPNG_FMT_RGB8, SPNG_DECODE_TRNS)) {
        throw Error(ErrorCode::dataset, fmt::format("corrupt PNG: {}", spng_strerror(rc)));
      }
      if (whole) return;
      for (int y = 0; y < region.height; ++y) {
        std::memcpy(out + y * row, image + (static_cast<std::size_t>(region.y + y) * info.width + region.x) * 3, row);
      }
      return;
    }
    // Row by row, and no further than the region's last row: each row is filtered against the one
    // above, so the rows above it are decoded too; those below never are (as for a JPEG).
    const std::size_t image_row = size / static_cast<std::size_t>(info.height);
    if (int rc = spng_decode_image(ctx.get(), nullptr, 0, SPNG_FMT_RGB8, SPNG_DECODE_TRNS | SPNG_DECODE_PROGRESSIVE)) {
      throw Error(ErrorCode::dataset, fmt::format("corrupt PNG: {}", spng_strerror(rc)));
    }
    detail::fit_scratch(scratch, image_row);
    for (int y = 0; y < region.y + region.height; ++y) {
      if (int rc = spng_decode_row(ctx.get(), scratch.data(), image_row); rc != 0 && rc != SPNG_EOI) {
        throw Error(ErrorCode::dataset, fmt::format("corrupt PNG: {} (row {})", spng_strerror(rc), y));
      }
      if (y >= region.y) {
        std::memcpy(out + static_cast<std::size_t>(y - region.y) * row,
                    scratch.data() + static_cast<std::size_t>(region.x) * 3, row);
      }
    }
    return;
  }
  const int num = plan.scale_num;
  JpegRequest r;
  r.data = reinterpret_cast<const unsigned char*>(data.data());
  r.size = data.size();
  r.scale_num = num;
  const unsigned full_w = scaled(static_cast<unsigned>(info.width), num);
  const unsigned full_h = scaled(static_cast<unsigned>(info.height), num);
  r.x = static_cast<unsigned>(region.x) * num / 8;
  r.y = static_cast<unsigned>(region.y) * num / 8;
  r.width = static_cast<unsigned>(plan.width);
  r.height = static_cast<unsigned>(plan.height);
  // 16 pixels: an iMCU of 2x2 subsampled chroma, more than fancy upsampling looks across.
  constexpr unsigned kMargin = 16;
  r.decode_x = r.x > kMargin ? r.x - kMargin : 0;
  r.decode_y = r.y > kMargin ? r.y - kMargin : 0;
  r.decode_width = std::min(r.x + r.width + kMargin, full_w) - r.decode_x;
  r.decode_height = std::min(r.y + r.height + kMargin, full_h) - r.decode_y;
  detail::fit_scratch(scratch, static_cast<std::size_t>(full_w) * 4);  // a CMYK row
  r.out = reinterpret_cast<unsigned char*>(out);
  r.row = reinterpret_cast<unsigned char*>(scratch.data());
  r.pixels = static_cast<unsigned long long>(info.width) * static_cast<unsigned long long>(info.height);
  JpegErrors err;
  if (const int rc = jpeg_decode(&r, &err); rc != 0)
    throw Error(ErrorCode::dataset, fmt::format("{} JPEG: {}", rc == -2 ? "unsupported" : "corrupt", err.message));
}

}  // namespace stoker::formats
