// The per-sample operations of pipelines (docs/pipeline.md): the interface every operation has
// (the built-in ones are in loader/pipeline/ops/image_ops.h, the registry of names in loader/pipeline/ops/registry.h).
// An operation is built from its text, bound once to what the operation before it makes (which checks that it can take
// it and says what it makes), then run on every sample. Operations keep scratch memory between samples. Not
// synchronised.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/options.h"
#include "stoker/pipeline.h"

namespace stoker::detail {

// One operation as written: name and numeric arguments.
struct OpText {
  std::string name;
  std::vector<double> args;
  std::string text;  // "random_resized_crop(224)", for errors
};

// A sample's dtype and shape between operations (-1: known per sample only), whether it is
// encoded bytes, and whether an image is CHW (after to_chw).
struct Spec {
  bool bytes = false;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;
  bool chw = false;
};

// "u8[?,?,3]", "f32[3,224,224] (CHW)", "bytes"
std::string describe(const Spec& s);

// What one sample may cost an operation: Options' limits, given to every operation of a pipeline.
struct OpLimits {
  std::uint64_t max_image_pixels = kDefaultMaxImagePixels;  // Options::max_image_pixels
};

// The checks the built-in operations make of their text and input: each throws stoker::Error
// (invalid_option) naming the operation's text and what is wrong.
// Argument i, a whole number from 1 to 65536 (`what`: "the height").
int positive_int(const OpText& op, std::size_t i, const char* what);
// One of `counts` arguments (`usage` says which: "(height, width)").
void expect_args(const OpText& op, std::initializer_list<std::size_t> counts, const char* usage);
// An image: u8 or f32, [height, width, channels] (or CHW after to_chw, where `allow_chw`).
void expect_image(const Spec& in, const OpText& op, bool allow_chw = false);

// A sample's values as T.
template <class T>
const T* as(const SampleIn& in) {
  return reinterpret_cast<const T*>(in.data.data());
}

class Op {
 public:
  explicit Op(OpText text) : text_(std::move(text)) {}
  virtual ~Op() = default;
  // The output for `in`; records what run() needs to know of the input (its layout). Throws
  // stoker::Error for an input the operation cannot take (the caller names the field and position).
  virtual Spec bind(const Spec& in) = 0;
  // One sample; throws stoker::Error with the reason (the caller names the field and sample).
  virtual void run(const SampleIn& in, SampleOut& out, SampleRandom& random) = 0;
  // Called once, before bind(); operations that a hostile sample could make expensive keep what
  // applies to them.
  virtual void set_limits(const OpLimits&) {}
  const OpText& text() const { return text_; }

 protected:
  OpText text_;
};

}  // namespace stoker::detail
