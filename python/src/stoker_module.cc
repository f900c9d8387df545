// stoker._core: the Python binding of stoker's public C++ API (include/stoker/), and nothing more.
// The Python side (python/stoker/) checks argument types and turns keyword arguments into the
// Options below; every decision stays in the C++ library. Batches cross into Python by DLPack:
// each field is an array over the batch's slot, and one capsule per batch owns the stoker::Batch,
// so the slot returns to the workers when the last array of the batch is freed. The GIL is
// released whenever stoker waits or copies. No LibTorch and no CUDA library is linked: nanobind
// hands arrays to torch or numpy through their from_dlpack at run time.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/init.h"
#include "stoker/loader.h"
#include "stoker/options.h"
#include "stoker/version.h"

namespace nb = nanobind;

namespace {

// stoker.Error and stoker.StokerWarning, defined in Python (python/stoker/_errors.py) and handed
// over once at import.
nb::object& error_type() {
  static nb::object* t = new nb::object();  // never destroyed: outlives the interpreter's teardown
  return *t;
}
nb::object& warning_type() {
  static nb::object* t = new nb::object();
  return *t;
}

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
      if (PyErr_WarnEx(warning_type().ptr(), w.c_str(), 2) != 0) throw nb::python_error();
    }
  }
};

// The Options a Python Loader fills in, with enums as their Python spelling.
struct PyOptions {
  std::string source, format = "auto", group, pipeline, order = "sequential", shm_backing = "auto", device = "cpu",
                      staging = "auto";
  std::vector<std::string> fields, sources;
  std::size_t max_open_shards = 64;
  std::string lmdb_keys, lmdb_count_key;
  std::size_t batch_size = 1, num_workers = 0, prefetch = 2, held_batches = 1, prefetch_to_device = 2;
  bool num_workers_auto = false, prefetch_auto = false, shuffle = false, drop_last = false, shard_from_env = false;
  std::uint64_t seed = 0, shm_budget = 0, max_image_pixels = stoker::kDefaultMaxImagePixels;
  std::uint32_t shard_rank = 0, shard_world_size = 1, max_respawns = 3;
  int worker_oom_score_adj = 500;
  double shm_fraction = 0.5, timeout_s = 300, shutdown_grace_s = 2;
};

[[noreturn]] void bad(const std::string& name, const std::string& value, const char* allowed) {
  throw stoker::Error(stoker::ErrorCode::invalid_option,
                      "stoker: " + name + "='" + value + "' is not one of " + allowed);
}

stoker::Options to_options(const PyOptions& p, const std::shared_ptr<WarningQueue>& warnings) {
  stoker::Options o;
  o.source = p.source;
  o.sources = p.sources;
  o.max_open_shards = p.max_open_shards;
  o.lmdb_keys = p.lmdb_keys;
  o.lmdb_count_key = p.lmdb_count_key;
  if (p.format == "auto") {
    o.format = stoker::Format::auto_detect;
  } else if (p.format == "hdf5") {
    o.format = stoker::Format::hdf5;
  } else if (p.format == "lmdb") {
    o.format = stoker::Format::lmdb;
  } else {
    bad("format", p.format, "'auto', 'hdf5', 'lmdb'");
  }
  o.fields = p.fields;
  o.group = p.group;
  o.pipeline = p.pipeline;
  o.max_image_pixels = p.max_image_pixels;
  o.batch_size = p.batch_size;
  o.num_workers = p.num_workers_auto ? stoker::kAuto : p.num_workers;
  o.prefetch = p.prefetch_auto ? stoker::kAuto : p.prefetch;
  o.held_batches = p.held_batches;
  if (p.order == "sequential") {
    o.order = stoker::Order::sequential;
  } else if (p.order == "random") {
    o.order = stoker::Order::random;
  } else if (p.order == "quasi_random") {
    o.order = stoker::Order::quasi_random;
  } else {
    bad("order", p.order, "'sequential', 'random', 'quasi_random'");
  }
  o.shuffle = p.shuffle;
  o.seed = p.seed;
  o.drop_last = p.drop_last;
  o.shard = p.shard_from_env ? stoker::Shard::from_env() : stoker::Shard{p.shard_rank, p.shard_world_size};
  o.shm_budget = p.shm_budget;
  o.shm_fraction = p.shm_fraction;
  if (p.shm_backing == "auto") {
    o.shm_backing = stoker::ShmBacking::automatic;
  } else if (p.shm_backing == "dev_shm") {
    o.shm_backing = stoker::ShmBacking::dev_shm;
  } else if (p.shm_backing == "memfd") {
    o.shm_backing = stoker::ShmBacking::memfd;
  } else {
    bad("shm_backing", p.shm_backing, "'auto', 'dev_shm', 'memfd'");
  }
  o.timeout = std::chrono::milliseconds(std::llround(p.timeout_s * 1000.0));
  o.max_respawns = p.max_respawns;
  o.worker_oom_score_adj = p.worker_oom_score_adj;
  o.shutdown_grace = std::chrono::milliseconds(std::llround(p.shutdown_grace_s * 1000.0));
  o.device = stoker::Device::parse(p.device);
  o.prefetch_to_device = p.prefetch_to_device;
  if (p.staging == "auto") {
    o.staging = stoker::Staging::automatic;
  } else if (p.staging == "pinned_copy") {
    o.staging = stoker::Staging::pinned_copy;
  } else if (p.staging == "registered_shm") {
    o.staging = stoker::Staging::registered_shm;
  } else {
    bad("staging", p.staging, "'auto', 'pinned_copy', 'registered_shm'");
  }
  o.on_warning = [warnings](std::string_view w) { warnings->push(w); };
  return o;
}

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

enum class Framework { numpy, torch };

// How arrays are made: numpy arrays, or torch tensors through torch's own DLPack import, called
// directly on a DLPack capsule (torch._C._from_dlpack; torch.utils.dlpack.from_dlpack where a torch
// lacks it). The documented entry point re-checks the object, asks for its device and stream and
// calls that: a few microseconds per tensor, every batch.
struct Arrays {
  Framework framework = Framework::torch;
  nb::object from_dlpack;  // torch's, with framework torch
};

Arrays arrays_for(Framework fw) {
  Arrays a{fw, {}};
  if (fw == Framework::torch) {
    nb::module_ c = nb::module_::import_("torch._C");
    a.from_dlpack = nb::hasattr(c, "_from_dlpack") ? c.attr("_from_dlpack")
                                                   : nb::module_::import_("torch.utils.dlpack").attr("from_dlpack");
  }
  return a;
}

// One array over `data`, kept alive by `owner`, as a numpy array or a torch tensor.
nb::object make_array(const Arrays& arrays, const void* data, const std::vector<std::size_t>& shape,
                      nb::dlpack::dtype dtype, int device_type, int device_id, nb::handle owner) {
  static const std::byte empty{};
  void* p = const_cast<void*>(data != nullptr ? data : &empty);  // a zero-length field may have no data
  if (arrays.framework == Framework::torch) {
    // A DLPack capsule ("dltensor"), which torch takes over: the tensor keeps `owner` alive.
    nb::object capsule =
        nb::cast(nb::ndarray<>(p, shape.size(), shape.data(), owner, nullptr, dtype, device_type, device_id));
    return arrays.from_dlpack(capsule);
  }
  return nb::cast(nb::ndarray<nb::numpy>(p, shape.size(), shape.data(), owner, nullptr, dtype, device_type, device_id));
}

std::vector<std::size_t> sizes(const std::vector<std::int64_t>& shape) { return {shape.begin(), shape.end()}; }

// Host memory a copied field owns.
struct OwnedBytes {
  std::unique_ptr<std::byte[]> data;
};

template <class T>
nb::capsule owning_capsule(T* object) {
  return nb::capsule(object, [](void* p) noexcept { delete static_cast<T*>(p); });
}

// The keys of a batch's dict: each field's name and, for a bytes field, `name.offsets`, made once.
struct FieldKeys {
  std::vector<std::pair<nb::str, nb::str>> keys;  // per field: (name, name.offsets)
  const std::pair<nb::str, nb::str>& of(std::size_t f, std::string_view name) {
    while (keys.size() <= f) keys.emplace_back();
    if (!keys[f].first.is_valid()) {
      const std::string text(name);
      keys[f] = {nb::str(text.c_str()), nb::str((text + ".offsets").c_str())};
    }
    return keys[f];
  }
};

// The batch as {field: array}, field order kept; a bytes field as `name` (u8, flat) and
// `name.offsets` (i64, B+1). With `copy`, host fields are copied into memory of their own (the
// GIL released) and the batch released at once; device fields are cloned on torch's current
// stream, which the batch's copy is ordered before.
nb::dict batch_to_dict(stoker::Batch batch, const Arrays& fw, bool copy, FieldKeys& names) {
  auto* holder = new stoker::Batch(std::move(batch));
  nb::capsule owner = owning_capsule(holder);
  nb::dict out;
  const std::span<const stoker::FieldView> fields = holder->fields();
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const stoker::FieldView& f = fields[i];
    const bool on_device = f.device.kind == stoker::Device::Kind::cuda;
    const int device_type = on_device ? nb::device::cuda::value : nb::device::cpu::value;
    const int device_id = on_device ? f.device.index : 0;
    const nb::dlpack::dtype dtype = to_dlpack(f.dtype);
    std::vector<std::size_t> shape =
        f.kind == stoker::FieldKind::bytes ? std::vector<std::size_t>{f.bytes} : sizes(f.shape);
    const auto& [name, offsets_name] = names.of(i, f.name);
    if (copy && on_device) {
      out[name] = make_array(fw, f.data, shape, dtype, device_type, device_id, owner).attr("clone")();
    } else if (copy) {
      auto* bytes = new OwnedBytes{std::make_unique<std::byte[]>(f.bytes > 0 ? f.bytes : 1)};
      nb::capsule own = owning_capsule(bytes);
      {
        nb::gil_scoped_release release;
        if (f.bytes > 0) std::memcpy(bytes->data.get(), f.data, f.bytes);
      }
      out[name] = make_array(fw, bytes->data.get(), shape, dtype, device_type, device_id, own);
    } else {
      out[name] = make_array(fw, f.data, shape, dtype, device_type, device_id, owner);
    }
    if (f.kind == stoker::FieldKind::bytes) {
      const std::vector<std::size_t> oshape{f.offsets.size()};
      const nb::dlpack::dtype i64 = to_dlpack(stoker::DType::i64);  // offsets are below 2^63
      if (copy) {
        auto* o = new OwnedBytes{std::make_unique<std::byte[]>(f.offsets.size_bytes())};
        nb::capsule own = owning_capsule(o);
        std::memcpy(o->data.get(), f.offsets.data(), f.offsets.size_bytes());
        out[offsets_name] = make_array(fw, o->data.get(), oshape, i64, nb::device::cpu::value, 0, own);
      } else {
        out[offsets_name] = make_array(fw, f.offsets.data(), oshape, i64, nb::device::cpu::value, 0, owner);
      }
    }
  }
  if (copy && holder->device().kind != stoker::Device::Kind::cuda) holder->release();
  return out;
}

class PyLoader;

// One epoch's batches, as the iterator `for batch in loader` runs. Waits in slices of at most
// 100 ms with the GIL released, checking for signals between them, so that Ctrl-C interrupts a
// wait promptly.
class PyEpoch {
 public:
  // `current_stream`: with a CUDA device, a callable returning the CUstream of torch's current
  // stream as an integer (None otherwise).
  PyEpoch(stoker::Epoch epoch, std::shared_ptr<WarningQueue> warnings, Arrays arrays, bool copy,
          nb::object current_stream)
      : epoch_(std::move(epoch)),
        warnings_(std::move(warnings)),
        arrays_(std::move(arrays)),
        copy_(copy),
        current_stream_(std::move(current_stream)) {}

  // The next batch as a dict; StopIteration at the end of the epoch (and at every call after).
  nb::dict next() {
    if (over_) throw nb::stop_iteration();
    // A staged batch's copy is ordered before the work of the stream the caller runs on now; its
    // handle reaches Python as an integer (torch's Stream.cuda_stream).
    const std::uintptr_t stream = current_stream_.is_none() ? 0 : nb::cast<std::uintptr_t>(current_stream_());
    std::optional<stoker::Batch> batch;
    for (;;) {
      bool ready = false;
      {
        // The wait and the taking of the batch in one release of the GIL.
        nb::gil_scoped_release release;
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
    warnings_->issue();
    if (!batch) {
      over_ = true;
      last_indices_.clear();
      throw nb::stop_iteration();
    }
    last_indices_.assign(batch->indices().begin(), batch->indices().end());
    return batch_to_dict(std::move(*batch), arrays_, copy_, keys_);
  }
  const std::vector<std::uint64_t>& last_indices() const { return last_indices_; }

 private:
  stoker::Epoch epoch_;
  std::shared_ptr<WarningQueue> warnings_;
  Arrays arrays_;
  bool copy_;
  nb::object current_stream_;
  FieldKeys keys_;
  bool over_ = false;
  std::vector<std::uint64_t> last_indices_;
};

class PyLoader {
 public:
  PyLoader(const PyOptions& options, const std::string& framework, bool copy, nb::object current_stream)
      : warnings_(std::make_shared<WarningQueue>()), copy_(copy), current_stream_(std::move(current_stream)) {
    if (framework == "torch") {
      arrays_ = arrays_for(Framework::torch);
    } else if (framework == "numpy") {
      arrays_ = arrays_for(Framework::numpy);
    } else {
      bad("framework", framework, "'torch', 'numpy'");
    }
    stoker::Options o = to_options(options, warnings_);
    {
      nb::gil_scoped_release release;
      loader_ = std::make_unique<stoker::Loader>(std::move(o));
    }
    warnings_->issue();
  }

  PyEpoch epoch(std::uint64_t e, std::uint64_t start_batch) {
    return PyEpoch(get().epoch(e, start_batch), warnings_, arrays_, copy_, current_stream_);
  }
  PyEpoch resume(const std::string& state_json) {
    return PyEpoch(get().epoch(stoker::LoaderState::from_json(state_json)), warnings_, arrays_, copy_, current_stream_);
  }
  std::string state_json() const { return get().state().to_json(); }
  std::uint64_t batches_per_epoch() const { return get().batches_per_epoch(); }
  std::uint64_t samples_per_epoch() const { return get().samples_per_epoch(); }
  std::string describe_source() const { return get().describe_source(); }
  std::vector<int> worker_pids() const { return get().worker_pids(); }

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
    const stoker::Stats s = get().stats();
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
    d["shard_opens"] = s.shard_opens;
    d["depth"] = s.depth;
    d["shm_bytes"] = s.shm_bytes;
    d["shm_backing"] = s.shm_backing == stoker::ShmBacking::dev_shm ? "dev_shm"
                       : s.shm_backing == stoker::ShmBacking::memfd ? "memfd"
                                                                    : "none";
    d["auto_tuning"] = s.auto_tuning;
    d["h2d_bytes"] = s.h2d_bytes;
    d["h2d_seconds"] = s.h2d_seconds;
    d["gpu_wait_seconds"] = s.gpu_wait_seconds;
    d["gpu_span_seconds"] = s.gpu_span_seconds;
    d["gpu_steps"] = s.gpu_steps;
    d["staging"] = s.staging == stoker::Staging::registered_shm ? "registered_shm" : "pinned_copy";
    return d;
  }

  // Shuts the workers down now (the GIL released), rather than when the object is collected.
  void close() {
    nb::gil_scoped_release release;
    loader_.reset();
  }
  bool closed() const { return !loader_; }

  stoker::Loader& get() const {
    if (!loader_) throw stoker::Error(stoker::ErrorCode::invalid_option, "stoker: this Loader was closed");
    return *loader_;
  }

 private:
  std::shared_ptr<WarningQueue> warnings_;
  std::unique_ptr<stoker::Loader> loader_;
  Arrays arrays_;
  bool copy_;
  nb::object current_stream_;
};

void set_types(nb::object error, nb::object warning) {
  error_type() = std::move(error);
  warning_type() = std::move(warning);
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "stoker's C++ core (use the stoker package, not this module)";
  stoker::set_option_spelling(stoker::OptionSpelling::python);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const stoker::Error& e) {
      if (!error_type().is_valid()) {
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return;
      }
      nb::object err = error_type()(std::string(e.what()), std::string(stoker::error_code_name(e.code())));
      PyErr_SetObject(error_type().ptr(), err.ptr());
    }
  });

  m.def("_set_types", &set_types);
  m.def("version", [] { return std::string(STOKER_VERSION_STRING); });
  m.def("set_worker_executable", &stoker::set_worker_executable);
  m.def("worker_executable", &stoker::worker_executable);

  nb::class_<PyOptions>(m, "Options")
      .def(nb::init<>())
      .def_rw("source", &PyOptions::source)
      .def_rw("format", &PyOptions::format)
      .def_rw("fields", &PyOptions::fields)
      .def_rw("group", &PyOptions::group)
      .def_rw("pipeline", &PyOptions::pipeline)
      .def_rw("sources", &PyOptions::sources)
      .def_rw("max_open_shards", &PyOptions::max_open_shards)
      .def_rw("lmdb_keys", &PyOptions::lmdb_keys)
      .def_rw("lmdb_count_key", &PyOptions::lmdb_count_key)
      .def_rw("max_image_pixels", &PyOptions::max_image_pixels)
      .def_rw("batch_size", &PyOptions::batch_size)
      .def_rw("num_workers", &PyOptions::num_workers)
      .def_rw("num_workers_auto", &PyOptions::num_workers_auto)
      .def_rw("prefetch", &PyOptions::prefetch)
      .def_rw("prefetch_auto", &PyOptions::prefetch_auto)
      .def_rw("held_batches", &PyOptions::held_batches)
      .def_rw("order", &PyOptions::order)
      .def_rw("shuffle", &PyOptions::shuffle)
      .def_rw("seed", &PyOptions::seed)
      .def_rw("drop_last", &PyOptions::drop_last)
      .def_rw("shard_from_env", &PyOptions::shard_from_env)
      .def_rw("shard_rank", &PyOptions::shard_rank)
      .def_rw("shard_world_size", &PyOptions::shard_world_size)
      .def_rw("shm_budget", &PyOptions::shm_budget)
      .def_rw("shm_fraction", &PyOptions::shm_fraction)
      .def_rw("shm_backing", &PyOptions::shm_backing)
      .def_rw("timeout_s", &PyOptions::timeout_s)
      .def_rw("max_respawns", &PyOptions::max_respawns)
      .def_rw("worker_oom_score_adj", &PyOptions::worker_oom_score_adj)
      .def_rw("shutdown_grace_s", &PyOptions::shutdown_grace_s)
      .def_rw("device", &PyOptions::device)
      .def_rw("prefetch_to_device", &PyOptions::prefetch_to_device)
      .def_rw("staging", &PyOptions::staging);

  nb::class_<PyEpoch>(m, "Epoch", "One epoch's batches, in order: iterate it.")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &PyEpoch::next)
      .def_prop_ro("indices", &PyEpoch::last_indices, "Dataset indices of the samples of the batch last returned.");

  nb::class_<PyLoader>(m, "Loader")
      .def(nb::init<const PyOptions&, const std::string&, bool, nb::object>(), nb::arg("options"), nb::arg("framework"),
           nb::arg("copy"), nb::arg("current_stream").none())
      // An epoch keeps its loader alive: `for batch in stoker.Loader(...)` holds nothing else.
      .def("epoch", &PyLoader::epoch, nb::keep_alive<0, 1>())
      .def("resume", &PyLoader::resume, nb::keep_alive<0, 1>())
      .def("state_json", &PyLoader::state_json)
      .def("batches_per_epoch", &PyLoader::batches_per_epoch)
      .def("samples_per_epoch", &PyLoader::samples_per_epoch)
      .def("describe_source", &PyLoader::describe_source)
      .def("worker_pids", &PyLoader::worker_pids)
      .def("schema", &PyLoader::schema)
      .def("num_samples", &PyLoader::num_samples)
      .def("stats", &PyLoader::stats)
      .def("close", &PyLoader::close)
      .def_prop_ro("closed", &PyLoader::closed);
}
