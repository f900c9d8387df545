// A batch as Python sees it: a dict of numpy arrays or torch tensors over the batch's memory (made
// through DLPack), the keys made once per Loader, and the wait for it as a torch.profiler range.
#pragma once

#include <nanobind/nanobind.h>

#include <string>
#include <utility>
#include <vector>

#include "stoker/batch.h"
#include "stoker/options.h"
#include "stoker/schema.h"
#include "stoker/transform.h"

namespace stoker_py {

namespace nb = nanobind;

enum class Framework { numpy, torch };

// How arrays are made: numpy arrays, or torch tensors through torch's own DLPack import, called
// directly on a DLPack capsule (torch._C._from_dlpack; torch.utils.dlpack.from_dlpack where a torch
// lacks it). The documented entry point re-checks the object, asks for its device and stream and
// calls that: a few microseconds per tensor, every batch.
struct Arrays {
  Framework framework = Framework::torch;
  nb::object from_dlpack;  // torch's, with framework torch
  // With framework torch: torch.profiler's named ranges, and whether it records now on this thread
  // (profiling(): torch._C._autograd._profiler_enabled, a call through pybind11).
  nb::object record_function, profiler_enabled;
  // torch.autograd.profiler's globals, whose "_is_profiler_enabled" torch sets while a profiler
  // records in any thread (torch.profiler, autograd's profile, emit_nvtx and emit_itt; not the
  // deprecated profiler_legacy): torch's own fast check, a dict lookup, made before the call so
  // that a loop nobody profiles pays only the lookup. Absent where a torch lacks it.
  nb::object profiler_globals, profiler_flag;

  bool profiling() const;
};

Arrays arrays_for(Framework fw);

// While torch.profiler records, the wait for a batch as its range "stoker.wait" (it costs a check
// of a few nanoseconds per batch otherwise). Ended however the wait ends, Ctrl-C included.
class ProfilerRange {
 public:
  explicit ProfilerRange(const Arrays& arrays) {
    if (!arrays.profiling()) return;
    range_ = arrays.record_function("stoker.wait");
    range_.attr("__enter__")();
  }
  ~ProfilerRange() {
    if (!range_.is_valid()) return;
    nb::error_scope keep;  // an exception on its way out stays the one raised
    try {
      range_.attr("__exit__")(nb::none(), nb::none(), nb::none());
    } catch (const nb::python_error&) {  // a profiler that ended meanwhile: nothing to close
    }
  }
  ProfilerRange(const ProfilerRange&) = delete;
  ProfilerRange& operator=(const ProfilerRange&) = delete;

 private:
  nb::object range_;
};

// The keys of a batch's dict: each delivered field's name and `name.offsets`, made once per Loader
// (the C++ Loader refuses names that would collide, or hold a NUL). Read-only once made: shared by
// the threads that take batches.
struct FieldKeys {
  std::vector<std::pair<nb::str, nb::str>> keys;  // per field, in delivery order: (name, name.offsets)
  // With on_decode_error="skip": the key of the skipped samples' positions (stoker::kSkippedKey,
  // which no field has then); None otherwise.
  nb::object skipped;
  // Per field: a transform's ragged field, delivered as its values (of its dtype, rows of its
  // trailing dimensions) and offsets counted in rows; nullptr for any other.
  std::vector<const stoker::TransformField*> ragged;
  FieldKeys(const stoker::Schema& schema, bool skip, const stoker::Transform& transform) {
    for (const stoker::Field& f : schema.fields) {
      const std::string offsets = f.name + ".offsets";
      keys.emplace_back(nb::str(f.name.data(), f.name.size()), nb::str(offsets.data(), offsets.size()));
    }
    if (skip) skipped = nb::str(stoker::kSkippedKey.data(), stoker::kSkippedKey.size());
    fields_ = transform.fields;
    for (std::size_t i = 0; i < schema.fields.size(); ++i) {
      ragged.push_back(i < fields_.size() && fields_[i].ragged ? &fields_[i] : nullptr);
    }
  }

 private:
  std::vector<stoker::TransformField> fields_;
};

// The batch as {field: array}, field order kept; a bytes field as `name` (its elements, flat: u8
// for bytes) and `name.offsets` (i64, B+1, counting elements); with on_decode_error="skip", the positions of its
// skipped samples under "skipped" (i64, in memory of their own, on the CPU), last. Fields of at most kCopiedFieldBytes,
// and with `copy` every field, are copied into memory of their own (host fields; a large one with the GIL released) or
// cloned on torch's current stream (device fields, which the batch's copy is ordered before); a batch whose host fields
// are all copies is released at once.
nb::dict batch_to_dict(stoker::Batch batch, const Arrays& fw, bool copy, const FieldKeys& names);

}  // namespace stoker_py
