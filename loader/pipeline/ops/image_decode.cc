#include "loader/pipeline/ops/image_decode.h"

#include <fmt/format.h>
#include <spng.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

// jpeglib.h needs FILE and size_t declared first.
#include <jerror.h>
#include <jpeglib.h>

#include "stoker/error.h"
#include "stoker/schema.h"

namespace stoker::detail {
namespace {

// The most pixels an image may have: its RGB bytes stay within a sample's limit.
constexpr std::uint64_t kMaxPixels = kMaxSampleBytes / 3;

// libjpeg reports errors by calling error_exit, which must not return: it longjmps back to the
// setjmp in the function that called libjpeg. That function and every libjpeg frame in between
// hold no C++ object with a destructor, so the jump skips nothing (the rule TurboJPEG follows).
struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_jpeg_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings that mean the image is incomplete are errors: a truncated file must not become a grey
// bottom half. Other warnings (extraneous bytes between markers) are ignored, as PIL does.
void on_jpeg_message(j_common_ptr c, int level) {
  if (level >= 0) return;
  const int code = c->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_MUST_RESYNC || code == JWRN_NOT_SEQUENTIAL) {
    on_jpeg_error(c);
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
  unsigned char* out;  // height x width x 3
  unsigned char* row;  // one scaled row, output_width x 3
};

void use_errors(jpeg_decompress_struct& cinfo, JpegErrors* err) {
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = on_jpeg_error;
  err->mgr.emit_message = on_jpeg_message;
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

// The decode: 0 on success. C-style: see JpegErrors.
int jpeg_decode(const JpegRequest* r, JpegErrors* err) {
  jpeg_decompress_struct cinfo;
  use_errors(cinfo, err);
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, r->data, r->size);
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
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
    std::memcpy(r->out + static_cast<std::size_t>(y - r->y) * r->width * 3,
                r->row + static_cast<std::size_t>(skip_x) * 3, static_cast<std::size_t>(r->width) * 3);
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

ImageInfo image_info(std::span<const std::byte> data) {
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
  return info;
}

Decoded decode_region(std::span<const std::byte> data, const ImageInfo& info, const Region& region, int min_width,
                      int min_height, std::vector<std::byte>& out, std::vector<std::byte>& scratch) {
  if (info.kind == ImageInfo::Kind::png) {
    SpngCtx ctx = open_png(data);
    spng_ihdr ihdr;
    if (int rc = spng_get_ihdr(ctx.get(), &ihdr))
      throw Error(ErrorCode::dataset, fmt::format("corrupt PNG header: {}", spng_strerror(rc)));
    std::size_t size = 0;
    if (int rc = spng_decoded_image_size(ctx.get(), SPNG_FMT_RGB8, &size)) {
      throw Error(ErrorCode::dataset, fmt::format("PNG: {}", spng_strerror(rc)));
    }
    out.resize(static_cast<std::size_t>(region.width) * region.height * 3);
    const std::size_t row = static_cast<std::size_t>(region.width) * 3;
    if (ihdr.interlace_method != SPNG_INTERLACE_NONE) {
      // Interlaced: every pass covers the whole image, so it is decoded whole.
      scratch.resize(size);
      if (int rc = spng_decode_image(ctx.get(), scratch.data(), size, SPNG_FMT_RGB8, SPNG_DECODE_TRNS)) {
        throw Error(ErrorCode::dataset, fmt::format("corrupt PNG: {}", spng_strerror(rc)));
      }
      for (int y = 0; y < region.height; ++y) {
        std::memcpy(out.data() + y * row,
                    scratch.data() + (static_cast<std::size_t>(region.y + y) * info.width + region.x) * 3, row);
      }
      return {region.width, region.height};
    }
    // Row by row, and no further than the region's last row: each row is filtered against the one
    // above, so the rows above it are decoded too; those below never are (as for a JPEG).
    const std::size_t image_row = size / static_cast<std::size_t>(info.height);
    if (int rc = spng_decode_image(ctx.get(), nullptr, 0, SPNG_FMT_RGB8, SPNG_DECODE_TRNS | SPNG_DECODE_PROGRESSIVE)) {
      throw Error(ErrorCode::dataset, fmt::format("corrupt PNG: {}", spng_strerror(rc)));
    }
    scratch.resize(image_row);
    for (int y = 0; y < region.y + region.height; ++y) {
      if (int rc = spng_decode_row(ctx.get(), scratch.data(), image_row); rc != 0 && rc != SPNG_EOI) {
        throw Error(ErrorCode::dataset, fmt::format("corrupt PNG: {} (row {})", spng_strerror(rc), y));
      }
      if (y >= region.y) {
        std::memcpy(out.data() + static_cast<std::size_t>(y - region.y) * row,
                    scratch.data() + static_cast<std::size_t>(region.x) * 3, row);
      }
    }
    return {region.width, region.height};
  }
  // The smallest of 1/8, 2/8, 4/8 at which the region still covers what it will be resized to:
  // libjpeg-turbo has SIMD inverse DCTs for those scales (and 8/8) only; the others are slower
  // than decoding in full and resizing a little more.
  int num = 8;
  if (min_width > 0 && min_height > 0) {
    while (num > 1 && region.width * (num / 2) / 8 >= min_width && region.height * (num / 2) / 8 >= min_height) {
      num /= 2;
    }
  }
  JpegRequest r;
  r.data = reinterpret_cast<const unsigned char*>(data.data());
  r.size = data.size();
  r.scale_num = num;
  const unsigned full_w = scaled(static_cast<unsigned>(info.width), num);
  const unsigned full_h = scaled(static_cast<unsigned>(info.height), num);
  r.x = static_cast<unsigned>(region.x) * num / 8;
  r.y = static_cast<unsigned>(region.y) * num / 8;
  r.width = std::min(scaled(static_cast<unsigned>(region.x + region.width), num), full_w) - r.x;
  r.height = std::min(scaled(static_cast<unsigned>(region.y + region.height), num), full_h) - r.y;
  // 16 pixels: an iMCU of 2x2 subsampled chroma, more than fancy upsampling looks across.
  constexpr unsigned kMargin = 16;
  r.decode_x = r.x > kMargin ? r.x - kMargin : 0;
  r.decode_y = r.y > kMargin ? r.y - kMargin : 0;
  r.decode_width = std::min(r.x + r.width + kMargin, full_w) - r.decode_x;
  r.decode_height = std::min(r.y + r.height + kMargin, full_h) - r.decode_y;
  out.resize(static_cast<std::size_t>(r.width) * r.height * 3);
  scratch.resize(static_cast<std::size_t>(full_w) * 3);
  r.out = reinterpret_cast<unsigned char*>(out.data());
  r.row = reinterpret_cast<unsigned char*>(scratch.data());
  JpegErrors err;
  if (jpeg_decode(&r, &err) != 0) throw Error(ErrorCode::dataset, fmt::format("corrupt JPEG: {}", err.message));
  return {static_cast<int>(r.width), static_cast<int>(r.height)};
}

}  // namespace stoker::detail
