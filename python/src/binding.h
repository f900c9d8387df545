// What the binding's files share: the dtype's DLPack spelling, and the exit gate's hold and
// release (stoker_module.cc, ExitGate) for a thread that takes the GIL inside stoker.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>

#include "stoker/dtype.h"
#include "stoker/transform.h"

namespace stoker_py {

namespace nb = nanobind;

nb::dlpack::dtype to_dlpack(stoker::DType t);

// Before this thread takes the GIL inside stoker, having released it: whether it may (see
// ExitGate); if so, gate_release() once it no longer holds it.
bool gate_hold() noexcept;
void gate_release() noexcept;
[[noreturn]] void park_until_the_process_ends() noexcept;

// A Python transform's runner (python/stoker/_transform.py, Runner) as a stoker::SampleTransform.
std::shared_ptr<stoker::SampleTransform> make_py_transform(nb::object runner);
// _core._serve_transform_host and the seed rule's words, for the package's Python files.
void bind_transform(nb::module_& m);

}  // namespace stoker_py
