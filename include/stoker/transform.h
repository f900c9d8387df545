// stoker/transform.h: per-sample code of the user's own, run in the workers after the pipelines.
//
// A transform takes one sample's fields as the pipelines deliver them and returns the fields the
// Loader delivers instead: it may add, drop or change fields (their dtype and shape). What it returns
// is declared up front (Transform::fields), so that the ring is sized before any worker starts; a
// sample that returns something else fails its batch with ErrorCode::transform, naming the sample,
// the field and both shapes.
//
// Where it runs (docs/transform.md):
//   - without workers, in the thread that asks for the batch (Transform::local);
//   - with workers forked from the training process, in each worker (Transform::local, inherited
//     through fork);
//   - with a host program (Transform::host), in workers forked from a fork server that is an exec
//     of that program: its main() calls serve_transform_host(), whose factory rebuilds the
//     transform from Transform::payload once, before the workers are forked (the Python package
//     hosts Python functions so, in the trainer's own interpreter).
// Like a pipeline operation, a transform must give the same output for the same (epoch, sample) in
// any worker: randomness drawn from (seed, epoch, index), no state carried between samples.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/export.h"

namespace stoker {

// One field of one sample, as a transform receives or returns it; valid for the call only. A bytes
// field (an encoded image, a ragged field) is one-dimensional: {its length} elements of its dtype
// (u8 for bytes, i32 for h5py's vlen int32 token ids).
struct SampleField {
  std::string_view name;
  DType dtype = DType::u8;
  std::span<const std::int64_t> shape;
  std::span<const std::byte> data;  // C order, exactly the shape's bytes
};

// Where a transform puts the fields of its sample: one put() per declared field, in any order.
// put() copies the data; it throws stoker::Error (ErrorCode::transform) for a field that was not
// declared, was put twice, or has another dtype or shape than declared.
class STOKER_API SampleSink {
 public:
  virtual void put(const SampleField& field) = 0;

 protected:
  ~SampleSink() = default;
};

class STOKER_API SampleTransform {
 public:
  virtual ~SampleTransform();
  // Sample `index` (of the dataset) in `epoch`: `in` holds its fields in delivery order; every
  // declared field is put into `out`. Throws stoker::Error (ErrorCode::transform) saying what went
  // wrong; the batch fails with that text, the sample named before it.
  virtual void apply(std::span<const SampleField> in, std::uint64_t epoch, std::uint64_t index, SampleSink& out) = 0;
};

// A field a transform returns.
struct TransformField {
  std::string name;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;  // per sample, {} for a scalar; ragged: the first dimension varies
  // Its first dimension may differ per sample: delivered as a bytes field (its values' bytes back to
  // back, `name.offsets` in bytes); `max_sample_bytes` sizes its region in the ring (a batch holds
  // batch_size times as many bytes, in any mix), and a batch that needs more fails naming the field.
  bool ragged = false;
  std::uint64_t max_sample_bytes = 0;
  bool operator==(const TransformField&) const = default;
};

// Options::transform. Without fields, there is none.
struct Transform {
  std::vector<TransformField> fields;  // what it returns, in delivery order
  std::shared_ptr<SampleTransform> local;
  // The program that hosts it, as argv (host[0] is the path exec'd), and what that program's
  // factory rebuilds it from. Needed for workers when this process starts them by exec
  // (stoker/init.h); used for them whenever given.
  std::vector<std::string> host;
  std::string payload;

  bool enabled() const noexcept { return !fields.empty(); }
};

// What a host's interpreter does around each fork of a worker (CPython: PyOS_BeforeFork,
// PyOS_AfterFork_Parent, PyOS_AfterFork_Child): its locks and at-fork handlers kept consistent.
struct ForkHooks {
  std::function<void()> before;  // in the host, before fork
  std::function<void()> parent;  // in the host, after fork (whether or not it succeeded)
  std::function<void()> child;   // in the worker, first
};

// In a program started as a transform host (Transform::host): receives the Loader's setup, calls
// `factory(payload)` once, then forks the workers, around each fork calling `hooks`, and serves
// them. Never returns; throws stoker::Error (ErrorCode::invalid_option) in a process that was not
// started as a fork server.
using TransformFactory = std::function<std::shared_ptr<SampleTransform>(const std::string& payload)>;
[[noreturn]] STOKER_API void serve_transform_host(const TransformFactory& factory, const ForkHooks& hooks = {});

}  // namespace stoker
