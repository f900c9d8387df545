// What the binding's files share: the dtype's DLPack spelling and the user's transform (the exit
// gate is exit_gate.h).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>

#include "stoker/dtype.h"
#include "stoker/transform.h"

namespace stoker_py {

namespace nb = nanobind;

nb::dlpack::dtype to_dlpack(stoker::DType t);

// A Python transform's runner (python/stoker/_transform_runner.py, Runner) as a stoker::SampleTransform.
std::shared_ptr<stoker::SampleTransform> make_py_transform(nb::object runner);
// _core._serve_transform_host and the seed rule's words, for the package's Python files.
void bind_transform(nb::module_& m);

}  // namespace stoker_py
