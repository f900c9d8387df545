// _core.Options: stoker::Options itself, as the Python package fills it in (python/stoker/_arguments.py):
// each member under its own name, an enum as its name (stoker/option_values.h), a duration in
// seconds (`timeout_s`), the shard as `shard_rank`, `shard_world_size` or `shard_from_env()`. And the
// Loader's warnings, issued through Python's warnings module.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/error.h"
#include "stoker/options.h"
#include "stoker/transform.h"

namespace stoker_py {

namespace nb = nanobind;

// stoker.StokerWarning, defined in Python (python/stoker/_errors.py) and handed over at import.
nb::object& warning_type();

// A Loader's warnings, collected on whichever thread stoker reports them, and issued through
// Python's warnings module on the interpreter's thread after each call that may have made some.
struct WarningQueue {
  std::mutex mutex;
  std::vector<std::string> pending;
  std::atomic<bool> any{false};  // pending is not empty: issue(), after every batch, looks at this only
  void push(std::string_view w) {
    std::lock_guard<std::mutex> lock(mutex);
    pending.emplace_back(w);
    any.store(true, std::memory_order_release);
  }
  void issue() {
    if (!any.load(std::memory_order_acquire)) return;
    std::vector<std::string> out;
    {
      std::lock_guard<std::mutex> lock(mutex);
      out.swap(pending);
      any.store(false, std::memory_order_relaxed);
    }
    for (const std::string& w : out) {
      if (PyErr_WarnEx(warning_type().ptr(), stoker::printable(w, stoker::Printable::message).c_str(), 2) != 0)
        throw nb::python_error();
    }
  }
};

// The options of a Loader with its warnings queued for Python (Options::on_warning).
stoker::Options with_warnings(stoker::Options o, const std::shared_ptr<WarningQueue>& warnings);
// A keyword argument whose value is none of those `allowed`: stoker.Error (invalid_option).
[[noreturn]] void bad(const std::string& name, const std::string& value, const std::string& allowed);

// _core.Options, _core.AUTO and _core.option_names.
void bind_options(nb::module_& m);

}  // namespace stoker_py
