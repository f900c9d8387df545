// stoker/pipeline.h: per-sample operations that run in the workers (decode, crop, resize, ...).
//
// A pipeline is data: Options::pipeline holds text such as
//
//   "jpeg=decode,random_resized_crop(224),flip,to_chw; depth=resize(64,64)"
//
// (a field, '=', operations separated by ','; fields separated by ';'), so that it crosses fork()
// as it is. Each operation maps one sample to one sample; the last one's output dtype and shape
// must be known when the loader is built, so that every batch of the field is one fixed-size array.
// Random operations draw from a generator seeded by (Options::seed, epoch, sample index) only:
// the batches are the same for any number of workers, run after run (docs/pipeline.md).
//
// User operations are C++ functions registered by name before the Loader is built:
//
//   stoker::OpSpec invert_spec(const stoker::OpSpec& in, std::span<const double> args) { return in; }
//   void invert(const stoker::SampleIn& in, stoker::SampleOut& out, std::span<const double> args,
//               stoker::SampleRandom& random) {
//     std::byte* o = out.resize(in.dtype, in.shape);
//     for (std::size_t i = 0; i < in.data.size(); ++i) o[i] = ~in.data[i];
//   }
//   STOKER_REGISTER_OP(invert, invert_spec, invert);   // at namespace scope
//
// A user operation runs in a worker process: it may allocate, throw stoker::Error (reported as
// that sample's error, with the field and index) and use `random`; it must not keep state between
// samples that changes its output (the same sample must give the same result in any worker), start
// threads, or touch CUDA. Registration is not synchronised: register before any Loader exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/export.h"

namespace stoker {

// The dtype and shape of a sample between operations. A dimension of -1 is known only per sample
// (a decoded image's height and width); `bytes` marks a variable-length run of elements of `dtype`
// (u8: bytes, an encoded image), which has no shape.
struct OpSpec {
  bool bytes = false;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;
  bool operator==(const OpSpec&) const = default;
};

// One sample going into an operation (valid for the call only).
struct SampleIn {
  bool bytes = false;
  DType dtype = DType::u8;
  std::span<const std::int64_t> shape;
  std::span<const std::byte> data;
};

// Where an operation writes its sample. Memory is reused between samples.
class STOKER_API SampleOut {
 public:
  // Sets the output's dtype and shape and returns room for its bytes (C order).
  std::byte* resize(DType dtype, std::span<const std::int64_t> shape);
  std::byte* resize(DType dtype, std::initializer_list<std::int64_t> shape) {
    return resize(dtype, std::span<const std::int64_t>(shape.begin(), shape.size()));
  }

  DType dtype() const noexcept { return dtype_; }
  std::span<const std::int64_t> shape() const noexcept { return shape_; }
  std::span<std::byte> data() noexcept { return {target_ ? target_ : buffer_.data(), size_}; }
  std::span<const std::byte> data() const noexcept { return {target_ ? target_ : buffer_.data(), size_}; }

  // The last operation of a pipeline writes straight into the batch: an output of exactly
  // `bytes` bytes goes to `target` (null: none).
  void set_target(std::byte* target, std::size_t bytes) noexcept {
    target_ = target;
    target_bytes_ = bytes;
  }

 private:
  DType dtype_ = DType::u8;
  std::vector<std::int64_t> shape_;
  std::vector<std::byte> buffer_;
  std::size_t size_ = 0;
  std::byte* target_ = nullptr;
  std::size_t target_bytes_ = 0;
};

// The random numbers of one sample: a SplitMix64 stream seeded from (seed, epoch, sample index,
// field), shared by the sample's operations in order.
class STOKER_API SampleRandom {
 public:
  explicit SampleRandom(std::uint64_t state) noexcept : state_(state) {}
  std::uint64_t next() noexcept;
  // Uniform in [0, 1).
  double uniform() noexcept;
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [lo, hi].
  std::int64_t integer(std::int64_t lo, std::int64_t hi) noexcept;

 private:
  std::uint64_t state_;
};

struct UserOp {
  // The output of the operation for an input `in` (dimensions may be -1) and arguments `args`;
  // throws stoker::Error for an input or arguments it cannot take.
  std::function<OpSpec(const OpSpec& in, std::span<const double> args)> spec;
  std::function<void(const SampleIn& in, SampleOut& out, std::span<const double> args, SampleRandom& random)> run;
};

// Registers `op` under `name` (letters, digits, '_'); throws stoker::Error for a name already
// taken (including the built-in operations). Returns true, for STOKER_REGISTER_OP.
STOKER_API bool register_op(const std::string& name, UserOp op);

// Checks `text`'s syntax, operations and arguments without a dataset: throws stoker::Error naming
// the field, the operation or the argument that is wrong. (The Loader also checks the fields exist
// and that each operation can take what the one before it makes.)
STOKER_API void check_pipeline(std::string_view text);

}  // namespace stoker

#define STOKER_REGISTER_OP(name, spec_fn, run_fn)                  \
  [[maybe_unused]] static const bool stoker_registered_op_##name = \
      ::stoker::register_op(#name, ::stoker::UserOp{spec_fn, run_fn})
