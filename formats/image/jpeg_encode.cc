#include "formats/image/jpeg_encode.h"

#include <fmt/format.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

// clang-format off
#include <jpeglib.h>  // after <cstdio>: it needs FILE
#include <jerror.h>   // after jpeglib.h: its message codes
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

// libjpeg's output written straight into a vector (libjpeg's own memory destination frees the
// caller's buffer when it grows and tells the new one only at the end: on an error it is lost).
struct VectorDestination {
  jpeg_destination_mgr mgr;  // first: libjpeg's dest pointer is this struct's address
  std::vector<std::byte>* out;
};

// The destination's callbacks run inside libjpeg's C frames, which an exception must not cross: a
// failed allocation becomes libjpeg's own error (JERR_OUT_OF_MEMORY), reported by error_exit.
// (The jump is taken outside the handler, which must end before it.)
template <class Grow>
void resize_or_fail(j_compress_ptr c, Grow&& grow) {
  bool failed = false;
  try {
    grow();
  } catch (...) {
    failed = true;
  }
  if (failed) {
    c->err->msg_code = JERR_OUT_OF_MEMORY;
    c->err->msg_parm.i[0] = 0;
    (*c->err->error_exit)(reinterpret_cast<j_common_ptr>(c));
  }
}

void start_vector(j_compress_ptr c) {
  auto* d = reinterpret_cast<VectorDestination*>(c->dest);
  resize_or_fail(c, [&] { d->out->resize(std::max<std::size_t>(d->out->capacity(), 1u << 16)); });
  d->mgr.next_output_byte = reinterpret_cast<JOCTET*>(d->out->data());
  d->mgr.free_in_buffer = d->out->size();
}

boolean grow_vector(j_compress_ptr c) {
  auto* d = reinterpret_cast<VectorDestination*>(c->dest);
  const std::size_t used = d->out->size();
  resize_or_fail(c, [&] { d->out->resize(used * 2); });  // at most about the RGB input (a small, re-encoded image)
  d->mgr.next_output_byte = reinterpret_cast<JOCTET*>(d->out->data() + used);
  d->mgr.free_in_buffer = d->out->size() - used;
  return TRUE;
}

void end_vector(j_compress_ptr c) {
  auto* d = reinterpret_cast<VectorDestination*>(c->dest);
  d->out->resize(d->out->size() - d->mgr.free_in_buffer);
}

// 0 on success, the JPEG in *out.
int jpeg_compress_rgb(const std::uint8_t* rgb, int height, int width, int quality, std::vector<std::byte>* out,
                      EncodeErrors* err) {
  jpeg_compress_struct c;
  VectorDestination dest{{}, out};
  dest.mgr.init_destination = start_vector;
  dest.mgr.empty_output_buffer = grow_vector;
  dest.mgr.term_destination = end_vector;
  c.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = on_encode_error;
  err->mgr.emit_message = ignore_message;
  if (setjmp(err->jump)) {
    jpeg_destroy_compress(&c);
    return -1;
  }
  jpeg_create_compress(&c);
  c.dest = &dest.mgr;
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
  out.clear();
  const int rc = jpeg_compress_rgb(rgb, height, width, quality, &out, &err);
  if (rc != 0) throw Error(ErrorCode::dataset, fmt::format("JPEG encoding of {}x{}: {}", width, height, err.message));
}

}  // namespace stoker::formats
