// The per-sample operations of pipelines (docs/pipeline.md): the interface every operation has,
// and the built-in ones. An operation is built from its text, bound once to what the operation
// before it makes (which checks that it can take it and says what it makes), then run on every
// sample. Operations keep scratch memory between samples. Not synchronised.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dtype.h"
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

class Op {
 public:
  explicit Op(OpText text) : text_(std::move(text)) {}
  virtual ~Op() = default;
  // The output for `in`; records what run() needs to know of the input (its layout). Throws
  // stoker::Error for an input the operation cannot take (the caller names the field and position).
  virtual Spec bind(const Spec& in) = 0;
  // One sample; throws stoker::Error with the reason (the caller names the field and sample).
  virtual void run(const SampleIn& in, SampleOut& out, SampleRandom& random) = 0;
  const OpText& text() const { return text_; }

 protected:
  OpText text_;
};

// The built-in operation `text` names, with its arguments checked; nullptr for another name.
std::unique_ptr<Op> make_builtin_op(const OpText& text);
bool is_builtin_op(std::string_view name);
// The built-in operations' names, in documentation order.
const std::vector<std::string>& builtin_op_names();

// `first` and `second` (bound, adjacent; `second_out` is what second was bound to make) as one
// operation that does both in one pass, when they are a pair that can: decode followed by a crop
// (decode only the region), flip followed by to_chw (one copy). Otherwise nullptr, and both are
// left as they are.
std::unique_ptr<Op> fuse(std::unique_ptr<Op>& first, std::unique_ptr<Op>& second, const Spec& second_out);

}  // namespace stoker::detail
