// stoker._core: the Python binding of stoker's public C++ API (include/stoker/), and nothing more.
// The Python side (python/stoker/) checks argument types and turns keyword arguments into the
// Options below; every decision stays in the C++ library. Batches cross into Python by DLPack:
// each field is an array over the batch's slot, and one capsule per batch owns the stoker::Batch,
// so the slot returns to the workers when the last array of the batch is freed. The GIL is
// released whenever stoker waits or copies. No LibTorch and no CUDA library is linked: nanobind
// hands arrays to torch or numpy through their from_dlpack at run time.
//
// Threads: any Python thread may use a Loader and its iterators, as the C++ Loader allows
// (stoker/loader.h). The threads that take batches of one Loader take turns (a lock of the
// Loader's, waited for in slices like a batch, so that Ctrl-C still interrupts the wait): each
// batch goes to one thread, in order. A thread that is inside stoker when the interpreter exits
// (a daemon thread waiting for a batch) stays there until the process ends: see ExitGate.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "binding.h"
#include "exit_gate.h"
#include "py_batch.h"
#include "py_options.h"
#include "stoker/init.h"
#include "stoker/loader.h"
#include "stoker/option_values.h"
#include "stoker/options.h"
#include "stoker/version.h"

namespace nb = nanobind;

namespace {

using namespace stoker_py;

// stoker.Error and stoker.StokerWarning, defined in Python (python/stoker/_errors.py) and handed
// over once at import.
nb::object& error_type() {
  static nb::object* t = new nb::object();  // never destroyed: outlives the interpreter's teardown
  return *t;
}

// One epoch's batches, as the iterator `for batch in loader` runs. Waits in slices of at most
// 100 ms with the GIL released, checking for signals between them, so that Ctrl-C interrupts a
// wait promptly. Threads that take batches of the same Loader take turns (`turn`, the Loader's):
// a thread waits for its turn in the same slices, and holds it from its wait until it has taken its
// batch, so that each batch goes to one thread and no thread waits in C++ where Ctrl-C cannot reach.
class PyEpoch {
 public:
  // `current_stream`: with a CUDA device, a callable returning the CUstream of torch's current
  // stream as an integer (None otherwise).
  PyEpoch(stoker::Epoch epoch, std::shared_ptr<WarningQueue> warnings, Arrays arrays, bool copy,
          nb::object current_stream, std::shared_ptr<const FieldKeys> keys, std::shared_ptr<std::mutex> turn)
      : epoch_(std::move(epoch)),
        warnings_(std::move(warnings)),
        arrays_(std::move(arrays)),
        copy_(copy),
        current_stream_(std::move(current_stream)),
        keys_(std::move(keys)),
        turn_(std::move(turn)),
        owner_pid_(::getpid()) {}

  // The next batch as a dict; StopIteration at the end of the epoch (and at every call after).
  nb::dict next() {
    std::unique_lock<std::mutex> turn(*turn_, std::defer_lock);
    // In a fork, another thread of the parent may have held the turn: the C++ Epoch refuses there.
    if (::getpid() == owner_pid_ && !turn.try_lock()) wait_for_turn(turn);
    if (undelivered_) {
      std::optional<stoker::Batch> batch = std::move(undelivered_);
      undelivered_.reset();
      return hand_over(std::move(batch), turn);
    }
    if (over_) throw nb::stop_iteration();
    // A staged batch's copy is ordered before the work of the stream the caller runs on now; its
    // handle reaches Python as an integer (torch's Stream.cuda_stream).
    const std::uintptr_t stream = current_stream_.is_none() ? 0 : nb::cast<std::uintptr_t>(current_stream_());
    std::optional<stoker::Batch> batch;
    std::optional<ProfilerRange> range(std::in_place, arrays_);
    for (;;) {
      bool ready = false;
      {
        // The wait and the taking of the batch in one release of the GIL.
        GilRelease release;
        ready = epoch_.wait(std::chrono::milliseconds(100));
        if (ready) {
          batch = epoch_.next();
          if (batch && batch->device().staged())
            batch->ready_on(reinterpret_cast<void*>(stream));  // NOLINT(performance-no-int-to-ptr)
        }
      }
      if (ready) break;
      warnings_->issue();
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
    range.reset();
    try {
      warnings_->issue();
    } catch (...) {
      // A warning that raises (python -W error::stoker.StokerWarning) loses no batch: the iterator
      // keeps it, and its next call returns it, in order (the turn is still held).
      if (batch) undelivered_ = std::move(batch);
      throw;
    }
    if (!batch) {
      over_ = true;
      last_indices_.clear();
      last_skipped_.clear();
      throw nb::stop_iteration();
    }
    return hand_over(std::move(batch), turn);
  }
  const std::vector<std::uint64_t>& last_indices() const { return last_indices_; }
  const std::vector<std::uint32_t>& last_skipped() const { return last_skipped_; }

 private:
  // The batch taken, as a dict; `turn` is let go of first, so that the next thread may wait while
  // this one builds its dict.
  nb::dict hand_over(std::optional<stoker::Batch> batch, std::unique_lock<std::mutex>& turn) {
    last_indices_.assign(batch->indices().begin(), batch->indices().end());
    last_skipped_.assign(batch->skipped().begin(), batch->skipped().end());
    if (turn.owns_lock()) turn.unlock();
    return batch_to_dict(std::move(*batch), arrays_, copy_, *keys_);
  }

  void wait_for_turn(std::unique_lock<std::mutex>& turn) {
    for (;;) {
      bool got = false;
      {
        GilRelease release;
        // Polled rather than try_lock_for, whose lock ThreadSanitizer does not see.
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
        while (!(got = turn.try_lock()) && std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
      if (got) return;
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
  }

  stoker::Epoch epoch_;
  std::shared_ptr<WarningQueue> warnings_;
  Arrays arrays_;
  bool copy_;
  nb::object current_stream_;
  std::shared_ptr<const FieldKeys> keys_;
  std::shared_ptr<std::mutex> turn_;
  pid_t owner_pid_;
  // Written while holding the GIL and the turn.
  bool over_ = false;
  std::vector<std::uint64_t> last_indices_;   // of the batch last returned, to whichever thread
  std::vector<std::uint32_t> last_skipped_;   // of the same batch
  std::optional<stoker::Batch> undelivered_;  // taken, but a warning raised before it was returned
};

class PyLoader {
 public:
  PyLoader(const stoker::Options& options, const std::string& framework, bool copy, nb::object current_stream)
      : warnings_(std::make_shared<WarningQueue>()), copy_(copy), current_stream_(std::move(current_stream)) {
    if (framework == "torch") {
      arrays_ = arrays_for(Framework::torch);
    } else if (framework == "numpy") {
      arrays_ = arrays_for(Framework::numpy);
    } else {
      bad("framework", framework, "'torch', 'numpy'");
    }
    stoker::Options o = with_warnings(options, warnings_);
    {
      GilRelease release;
      loader_ = std::make_shared<stoker::Loader>(std::move(o), keep_building);
    }
    keys_ = std::make_shared<const FieldKeys>(loader_->schema(), options.on_decode_error == stoker::OnDecodeError::skip,
                                              options.transform);
    warnings_->issue();
  }

  // f(loader) with the GIL released, the Loader kept alive meanwhile (another thread may close it)
  // and let go of before the GIL is taken back.
  template <class F>
  auto without_gil(F&& f) const {
    std::shared_ptr<stoker::Loader> loader = loader_;
    get();  // closed: says so
    GilRelease release;
    struct LetGo {
      std::shared_ptr<stoker::Loader>& loader;
      ~LetGo() { loader.reset(); }
    } let_go{loader};
    return f(*loader);
  }

  PyEpoch epoch(std::uint64_t e, std::uint64_t start_batch) {
    stoker::Epoch epoch = without_gil([&](stoker::Loader& l) { return l.epoch(e, start_batch); });
    return PyEpoch(std::move(epoch), warnings_, arrays_, copy_, current_stream_, keys_, turn_);
  }
  PyEpoch resume(const std::string& state_json) {
    const stoker::LoaderState state = stoker::LoaderState::from_json(state_json);
    stoker::Epoch epoch = without_gil([&](stoker::Loader& l) { return l.epoch(state); });
    return PyEpoch(std::move(epoch), warnings_, arrays_, copy_, current_stream_, keys_, turn_);
  }
  std::string state_json() const {
    return without_gil([](stoker::Loader& l) { return l.state().to_json(); });
  }
  std::uint64_t batches_per_epoch() const { return get().batches_per_epoch(); }
  std::uint64_t samples_per_epoch() const { return get().samples_per_epoch(); }
  std::string describe_source() const { return get().describe_source(); }
  std::map<std::string, std::string> metadata() const { return get().metadata(); }
  std::string write_index(const std::string& path) const {
    return without_gil([&](stoker::Loader& l) { return l.write_index(path); });
  }
  nb::list worker_pids() const {
    nb::list out;
    for (const int pid : without_gil([](stoker::Loader& l) { return l.worker_pids(); })) out.append(pid);
    return out;
  }

  nb::list schema() const {
    nb::list out;
    for (const stoker::Field& f : get().schema().fields) {
      nb::list shape;
      for (std::int64_t d : f.shape) shape.append(d);
      out.append(nb::make_tuple(f.name, f.is_bytes() ? "bytes" : "fixed", std::string(stoker::dtype_name(f.dtype)),
                                nb::tuple(shape)));
    }
    return out;
  }
  std::uint64_t num_samples() const { return get().schema().num_samples; }

  nb::dict stats() const {
    const stoker::Stats s = without_gil([](stoker::Loader& l) { return l.stats(); });
    warnings_->issue();
    nb::dict d;
    d["batches"] = s.batches;
    d["samples"] = s.samples;
    d["bytes"] = s.bytes;
    d["wait_seconds"] = s.wait_seconds;
    d["worker_busy_seconds"] = s.worker_busy_seconds;
    d["worker_cpu_seconds"] = s.worker_cpu_seconds;
    d["workers"] = s.workers;
    d["respawns"] = s.respawns;
    d["overflow_batches"] = s.overflow_batches;
    d["consumer_wakes"] = s.consumer_wakes;
    d["shard_opens"] = s.shard_opens;
    d["downloads"] = s.downloads;
    d["download_bytes"] = s.download_bytes;
    d["fetch_retries"] = s.fetch_retries;
    d["cache_hits"] = s.cache_hits;
    d["fetch_seconds"] = s.fetch_seconds;
    d["evictions"] = s.evictions;
    d["fetch_wait_seconds"] = s.fetch_wait_seconds;
    d["skipped_samples"] = s.skipped_samples;
    nb::list skipped;
    for (const std::uint64_t i : s.skipped_indices) skipped.append(i);
    d["skipped_indices"] = skipped;
    d["depth"] = s.depth;
    d["shm_bytes"] = s.shm_bytes;
    d["shm_backing"] = s.shm_backing ? std::string(stoker::name(*s.shm_backing)) : std::string("none");
    d["auto_tuning"] = s.auto_tuning;
    d["h2d_bytes"] = s.h2d_bytes;
    d["h2d_seconds"] = s.h2d_seconds;
    d["gpu_wait_seconds"] = s.gpu_wait_seconds;
    d["gpu_span_seconds"] = s.gpu_span_seconds;
    d["gpu_steps"] = s.gpu_steps;
    d["staging"] = std::string(stoker::name(s.staging));
    nb::dict stages;  // in the loader's order: read, transform, write, then the operations
    for (const stoker::StageTime& t : s.stages) stages[nb::str(t.name.data(), t.name.size())] = t.seconds;
    d["stages"] = stages;
    d["step_seconds"] = s.step_seconds;
    d["first_wait_seconds"] = s.first_wait_seconds;
    d["verdict"] = s.verdict;
    return d;
  }

  // Shuts the workers down now (the GIL released), rather than when the object is collected. Every
  // other thread sees the Loader closed at once; one inside a call of it finishes that call, and
  // the workers stop when it has (stoker/loader.h).
  void close() {
    std::shared_ptr<stoker::Loader> loader = std::move(loader_);
    GilRelease release;
    loader.reset();
  }
  bool closed() const { return !loader_; }

  // REQUIRES: the GIL (which close() takes to let go of the Loader).
  stoker::Loader& get() const {
    if (!loader_) throw stoker::Error(stoker::ErrorCode::invalid_option, "stoker: this Loader was closed");
    return *loader_;
  }

 private:
  std::shared_ptr<WarningQueue> warnings_;
  std::shared_ptr<stoker::Loader> loader_;
  Arrays arrays_;
  bool copy_;
  nb::object current_stream_;
  std::shared_ptr<const FieldKeys> keys_;                              // the batches' keys, made once
  std::shared_ptr<std::mutex> turn_ = std::make_shared<std::mutex>();  // see PyEpoch
};

// An epoch as a Python object that keeps its Loader alive (`for batch in stoker.Loader(...)` holds
// nothing else), made inside the call's Inside guard: nothing is left for nanobind to allocate after
// it (see ExitGate).
nb::object epoch_object(nb::handle loader, PyEpoch epoch) {
  nb::object out = nb::cast(std::move(epoch));
  nb::keep_alive_obj(out, loader);
  return out;
}

void set_types(nb::object error, nb::object warning) {
  error_type() = std::move(error);
  warning_type() = std::move(warning);
}

}  // namespace

namespace stoker_py {

nb::dlpack::dtype to_dlpack(stoker::DType t) {
  using C = nb::dlpack::dtype_code;
  auto make = [](C code, int bits) {
    return nb::dlpack::dtype{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
  };
  switch (t) {
    case stoker::DType::u8: return make(C::UInt, 8);
    case stoker::DType::i8: return make(C::Int, 8);
    case stoker::DType::u16: return make(C::UInt, 16);
    case stoker::DType::i16: return make(C::Int, 16);
    case stoker::DType::i32: return make(C::Int, 32);
    case stoker::DType::i64: return make(C::Int, 64);
    case stoker::DType::f16: return make(C::Float, 16);
    case stoker::DType::f32: return make(C::Float, 32);
    case stoker::DType::f64: return make(C::Float, 64);
    case stoker::DType::b8: return make(C::Bool, 8);
    case stoker::DType::u32: return make(C::UInt, 32);
    case stoker::DType::u64: return make(C::UInt, 64);
    case stoker::DType::bf16: return make(C::Bfloat, 16);
  }
  return make(C::UInt, 8);
}

}  // namespace stoker_py

NB_MODULE(_core, m) {
  m.doc() = "stoker's C++ core (use the stoker package, not this module)";
  stoker::set_option_spelling(stoker::OptionSpelling::python);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const stoker::Error& e) {
      // An interrupted batch that a pending Ctrl-C explains (one in a transform run here) is
      // KeyboardInterrupt, raised by the signal check.
      if (e.code() == stoker::ErrorCode::interrupted && PyErr_CheckSignals() != 0) return;
      if (!error_type().is_valid()) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return;
      }
      nb::object err = error_type()(std::string(e.what()), std::string(stoker::error_code_name(e.code())));
      PyErr_SetObject(error_type().ptr(), err.ptr());
    }
  });

  m.def("_set_types", &set_types);
  m.def("_at_exit", &at_exit, "Called by the package's atexit handler (see ExitGate in exit_gate.cc).");
  m.def("_set_leak_warnings", [](bool on) { nb::set_leak_warnings(on); });
  ::pthread_atfork(nullptr, nullptr, reset_gate_in_child);
  m.def("version", [] { return std::string(STOKER_VERSION_STRING); });
  m.def("set_worker_executable", &stoker::set_worker_executable);
  m.def("worker_executable", &stoker::worker_executable);

  stoker_py::bind_options(m);
  stoker_py::bind_transform(m);

  // A transform host started before its Loader (stoker/transform.h): the package asks it what the
  // transform returns on sample 0, then hands it to the Loader, whose workers it forks.
  nb::class_<stoker::StartedHost>(m, "StartedHost")
      .def_static("start", &stoker::StartedHost::start, nb::call_guard<Inside>())
      .def_prop_ro("pid", &stoker::StartedHost::pid)
      .def(
          "ask",
          [](stoker::StartedHost& h, const nb::bytes& q, double timeout_s) {
            std::string question(q.c_str(), q.size());
            GilRelease unlocked;
            h.ask(question, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_s * 1000)));
          },
          nb::call_guard<Inside>())
      .def(
          "answer",
          [](stoker::StartedHost& h, double wait_s) -> nb::object {
            std::optional<std::string> text;
            {
              GilRelease unlocked;
              text = h.answer(std::chrono::milliseconds(static_cast<std::int64_t>(wait_s * 1000)));
            }
            if (!text) return nb::none();
            return nb::bytes(text->data(), text->size());
          },
          nb::call_guard<Inside>(), "The answer within wait_s seconds, or None.")
      .def("discard", &stoker::StartedHost::discard, nb::call_guard<Inside>());

  nb::class_<PyEpoch>(m, "Epoch", "One epoch's batches, in order: iterate it.")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &PyEpoch::next, nb::call_guard<Inside>())
      .def_prop_ro("indices", &PyEpoch::last_indices,
                   "Dataset indices of the samples of the batch last returned (to whichever thread asked).")
      .def_prop_ro("skipped", &PyEpoch::last_skipped,
                   "Positions in the batch last returned (to whichever thread asked) of the samples whose decode "
                   "failed and was skipped (on_decode_error='skip'): their pipeline's field holds zeros. The "
                   "batch's own 'skipped' holds the same, and is the one to use when threads share the iterator.");

  // Every call that waits, copies or runs Python code inside stoker is guarded: see ExitGate.
  nb::class_<PyLoader>(m, "Loader")
      .def(nb::init<const stoker::Options&, const std::string&, bool, nb::object>(), nb::arg("options"),
           nb::arg("framework"), nb::arg("copy"), nb::arg("current_stream").none(), nb::call_guard<Inside>())
      // An epoch keeps its loader alive: `for batch in stoker.Loader(...)` holds nothing else.
      .def(
          "epoch",
          [](nb::handle self, std::uint64_t e, std::uint64_t start_batch) {
            return epoch_object(self, nb::cast<PyLoader&>(self).epoch(e, start_batch));
          },
          nb::call_guard<Inside>())
      .def(
          "resume",
          [](nb::handle self, const std::string& state) {
            return epoch_object(self, nb::cast<PyLoader&>(self).resume(state));
          },
          nb::call_guard<Inside>())
      .def("state_json", &PyLoader::state_json, nb::call_guard<Inside>())
      .def("batches_per_epoch", &PyLoader::batches_per_epoch)
      .def("samples_per_epoch", &PyLoader::samples_per_epoch)
      .def("describe_source", &PyLoader::describe_source)
      .def("metadata", &PyLoader::metadata)
      .def("worker_pids", &PyLoader::worker_pids, nb::call_guard<Inside>())
      .def("write_index", &PyLoader::write_index, nb::call_guard<Inside>())
      .def("schema", &PyLoader::schema, nb::call_guard<Inside>())
      .def("num_samples", &PyLoader::num_samples)
      .def("stats", &PyLoader::stats, nb::call_guard<Inside>())
      .def("close", &PyLoader::close, nb::call_guard<Inside>())
      .def_prop_ro("closed", &PyLoader::closed);
}
