#include "formats/image/jpeg_encode.h"

#include <fmt/format.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>

// clang-format off
#include <jpeglib.h>
// clang-format on

#include "stoker/error.h"

namespace stoker::formats {
namespace {

// libjpeg reports errors by calling error_exit, which must not return: it longjmps back to the
// setjmp in jpeg_compress_rgb, which holds no C++ object with a destructor (as in image_decode.cc).
struct EncodeErrors {
  jpeg_error_mgr mgr;  // first: libjpeg's err pointer is this struct's address
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_encode_error(j_common_ptr c) {
  auto* e = reinterpret_cast<EncodeErrors*>(c->err);
  (*c->err->format_message)(c, e->message);
  std::longjmp(e->jump, 1);
}

void ignore_message(j_common_ptr, int) {}

// 0 on success, with the JPEG in *buffer (malloc'd by libjpeg's memory destination, which keeps
// *buffer pointing at its current buffer also when it fails: the caller frees it either way).
int jpeg_compress_rgb(const std::uint8_t* rgb, int height, int width, int quality, unsigned char** buffer,
                      unsigned long* size, EncodeErrors* err) {
  jpeg_compress_struct c;
  c.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = on_encode_error;
  err->mgr.emit_message = ignore_message;
  if (setjmp(err->jump)) {
    jpeg_destroy_compress(&c);
    return -1;
  }
  jpeg_create_compress(&c);
  jpeg_mem_dest(&c, buffer, size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);  // 4:2:0 for YCbCr output
  jpeg_set_quality(&c, quality, TRUE);
  c.optimize_coding = TRUE;
  jpeg_start_compress(&c, TRUE);
  const std::size_t stride = static_cast<std::size_t>(width) * 3;
  while (c.next_scanline < c.image_height) {
    // libjpeg's API takes rows as non-const; it only reads them.
    JSAMPROW row = const_cast<std::uint8_t*>(rgb + c.next_scanline * stride);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return 0;
}

}  // namespace

void encode_jpeg(const std::uint8_t* rgb, int height, int width, int quality, std::vector<std::byte>& out) {
  if (quality < 1 || quality > 100)
    throw Error(ErrorCode::invalid_option, fmt::format("JPEG quality {}: must be 1..100", quality));
  EncodeErrors err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  const int rc = jpeg_compress_rgb(rgb, height, width, quality, &buffer, &size, &err);
  if (rc == 0) {
    out.resize(size);
    std::memcpy(out.data(), buffer, size);
  }
  std::free(buffer);
  if (rc != 0) throw Error(ErrorCode::dataset, fmt::format("JPEG encoding of {}x{}: {}", width, height, err.message));
}

}  // namespace stoker::formats
