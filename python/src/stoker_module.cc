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
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "binding.h"
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

// How the threads inside stoker meet the interpreter's exit. Once the interpreter is finalizing,
// Python ends a thread that takes the GIL (pthread_exit up to 3.13), also where it takes it back
// inside a call into Python that stoker's code makes (numpy's from_dlpack, the warnings module):
// unwinding through stoker's C++ frames reaches a noexcept one and aborts the process
// (std::terminate). So every call into the binding runs inside an Inside guard, and a thread
// inside stoker is counted while it holds the GIL or is about to take it back (GilRelease,
// keep_building). The package's atexit handler (atexit runs before finalizing starts, when only
// daemon threads are left) calls at_exit(): from then on a thread that would take the GIL inside
// stoker, entering or coming back from a wait, does not but waits for the process to end (it holds
// nothing then); and at_exit() lets go of the GIL until no thread is counted, so that those that
// hold it leave stoker or reach a wait first. A thread in a long wait (for workers that will never
// answer) does not hold the exit up: it parks when the wait returns. The thread that runs at_exit
// (the one that finalizes) goes on as usual. Atomics only, constant-initialized: a fork() child
// starts afresh (reset in the child, by pthread_atfork).
struct ExitGate {
  std::atomic<int> holding{0};  // threads inside stoker that hold the GIL or are taking it back
  std::atomic<bool> exiting{false};
  std::atomic<pthread_t> finalizer{};  // the thread that called at_exit()

  // Before this thread takes (or keeps) the GIL inside stoker: false when it must not (it is to
  // park), true when it may, and must then call release() when it no longer holds the GIL.
  bool hold() noexcept {
    holding.fetch_add(1);  // seq_cst with at_exit's store of `exiting`: one of the two sees the other
    if (parks_this_thread()) {
      holding.fetch_sub(1);
      return false;
    }
    return true;
  }
  void release() noexcept { holding.fetch_sub(1); }
  bool parks_this_thread() const noexcept { return exiting.load() && !pthread_equal(finalizer.load(), pthread_self()); }
};

constinit ExitGate g_gate;  // never destroyed while threads may wait in it: trivially destructible

}  // namespace

namespace stoker_py {

void park_until_the_process_ends() noexcept {
  for (;;) ::pause();
}
bool gate_hold() noexcept { return g_gate.hold(); }
void gate_release() noexcept { g_gate.release(); }

}  // namespace stoker_py

namespace {

using stoker_py::park_until_the_process_ends;

// Around every call into the binding (nb::call_guard), entered with the GIL.
struct Inside {
  Inside() noexcept {
    if (!g_gate.hold()) {
      (void)PyEval_SaveThread();  // a daemon thread calling stoker while the interpreter exits
      park_until_the_process_ends();
    }
  }
  // Once the interpreter exits, a daemon thread does not go back to nanobind's code around the call
  // (which may run Python code: a collection when it allocates), but parks here.
  ~Inside() {
    g_gate.release();
    if (g_gate.parks_this_thread()) {
      (void)PyEval_SaveThread();
      park_until_the_process_ends();
    }
  }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
};

// The GIL released for a wait or a copy, inside an Inside.
class GilRelease {
 public:
  GilRelease() noexcept : state_(PyEval_SaveThread()) { g_gate.release(); }
  ~GilRelease() {
    if (!g_gate.hold()) park_until_the_process_ends();
    PyEval_RestoreThread(state_);
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_;
};

// The package's atexit handler's: see ExitGate. Called with the GIL, outside any Inside.
void at_exit() {
  g_gate.finalizer.store(pthread_self());
  g_gate.exiting.store(true);
  PyThreadState* state = PyEval_SaveThread();  // threads that hold it inside stoker go on to leave or wait
  while (g_gate.holding.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  PyEval_RestoreThread(state);
}

void reset_gate_in_child() noexcept {
  g_gate.holding.store(0);
  g_gate.exiting.store(false);
}

// Whether construction goes on (called with the GIL released, inside the constructor's
// GilRelease): the constructing thread sees Ctrl-C (PyErr_CheckSignals runs the signal handlers, on
// the main thread), and stops once the interpreter exits.
bool keep_building() {
  if (!g_gate.hold()) return false;
  struct Released {
    ~Released() { g_gate.release(); }
  } released;
  nb::gil_scoped_acquire acquire;
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
  return true;
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
      if (PyErr_WarnEx(warning_type().ptr(), stoker::printable(w, stoker::Printable::message).c_str(), 2) != 0)
        throw nb::python_error();
    }
  }
};

// The Options a Python Loader fills in, with enums as their Python spelling.
struct PyOptions {
  std::string source, format = "auto", group, pipeline, order = "sequential", shm_backing = "auto", device = "cpu",
                      staging = "auto", on_decode_error = "fail", trace;
  std::vector<std::string> fields, sources, op_libraries;
  std::size_t max_open_shards = 64;
  std::string lmdb_keys, lmdb_count_key;
  std::size_t batch_size = 1, num_workers = 0, prefetch = 2, held_batches = 1, prefetch_to_device = 2;
  bool num_workers_auto = false, prefetch_auto = false, shuffle = false, drop_last = false, shard_from_env = false;
  std::uint64_t seed = 0, shm_budget = 0, max_image_pixels = stoker::kDefaultMaxImagePixels;
  std::uint32_t shard_rank = 0, shard_world_size = 1, max_respawns = 3;
  int worker_oom_score_adj = 500;
  double shm_fraction = 0.5, timeout_s = 300, shutdown_grace_s = 2;
  stoker::Transform transform;  // set_transform()
};

[[noreturn]] void bad(const std::string& name, const std::string& value, const char* allowed) {
  throw stoker::Error(stoker::ErrorCode::invalid_option,
                      "stoker: " + name + "='" + stoker::printable(value) + "' is not one of " + allowed);
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
  o.op_libraries = p.op_libraries;
  o.trace = p.trace;
  o.max_image_pixels = p.max_image_pixels;
  if (p.on_decode_error == "fail") {
    o.on_decode_error = stoker::OnDecodeError::fail;
  } else if (p.on_decode_error == "skip") {
    o.on_decode_error = stoker::OnDecodeError::skip;
  } else {
    bad("on_decode_error", p.on_decode_error, "'fail', 'skip'");
  }
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
  o.transform = p.transform;
  return o;
}

using stoker_py::to_dlpack;

enum class Framework { numpy, torch };

// How arrays are made: numpy arrays, or torch tensors through torch's own DLPack import, called
// directly on a DLPack capsule (torch._C._from_dlpack; torch.utils.dlpack.from_dlpack where a torch
// lacks it). The documented entry point re-checks the object, asks for its device and stream and
// calls that: a few microseconds per tensor, every batch.
struct Arrays {
  Framework framework = Framework::torch;
  nb::object from_dlpack;  // torch's, with framework torch
  // With framework torch: whether torch.profiler records now, and its named ranges.
  nb::object profiler_enabled, record_function;
};

Arrays arrays_for(Framework fw) {
  Arrays a{fw, {}, {}, {}};
  if (fw == Framework::torch) {
    nb::module_ c = nb::module_::import_("torch._C");
    a.from_dlpack = nb::hasattr(c, "_from_dlpack") ? c.attr("_from_dlpack")
                                                   : nb::module_::import_("torch.utils.dlpack").attr("from_dlpack");
    nb::object autograd = c.attr("_autograd");
    if (nb::hasattr(autograd, "_profiler_enabled")) {
      a.profiler_enabled = autograd.attr("_profiler_enabled");
      a.record_function = nb::module_::import_("torch.autograd.profiler").attr("record_function");
    }
  }
  return a;
}

// While torch.profiler records, the wait for a batch as its range "stoker.wait" (it costs a check
// of about 0.1 us per batch otherwise). Ended however the wait ends, Ctrl-C included.
class ProfilerRange {
 public:
  explicit ProfilerRange(const Arrays& arrays) {
    if (!arrays.profiler_enabled.is_valid() || !nb::cast<bool>(arrays.profiler_enabled())) return;
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

// The bytes of one row of a ragged field: its dtype's size times its trailing dimensions.
std::size_t row_bytes(const stoker::TransformField& f) {
  std::size_t n = stoker::dtype_size(f.dtype);
  for (std::size_t d = 1; d < f.shape.size(); ++d) n *= static_cast<std::size_t>(f.shape[d]);
  return n;
}

// A field of at most this many bytes (a batch's labels, indices, weights) is handed out as a copy:
// a loop that keeps it (labels.append(batch["label"])) holds no slot, and copying it costs less than
// the array around it. Larger fields alias the slot.
constexpr std::size_t kCopiedFieldBytes = 64 << 10;

// The batch as {field: array}, field order kept; a bytes field as `name` (its elements, flat: u8
// for bytes) and `name.offsets` (i64, B+1, counting elements); with on_decode_error="skip", the positions of its
// skipped samples under "skipped" (i64, in memory of their own, on the CPU), last. Fields of at most kCopiedFieldBytes,
// and with `copy` every field, are copied into memory of their own (host fields; a large one with the GIL released) or
// cloned on torch's current stream (device fields, which the batch's copy is ordered before); a batch whose host fields
// are all copies is released at once.
nb::dict batch_to_dict(stoker::Batch batch, const Arrays& fw, bool copy, const FieldKeys& names) {
  auto* holder = new stoker::Batch(std::move(batch));
  nb::capsule owner = owning_capsule(holder);
  nb::dict out;
  nb::object skipped;  // made first: the batch may be released below
  if (names.skipped.is_valid() && !names.skipped.is_none()) {
    const std::span<const std::uint32_t> at = holder->skipped();
    auto* positions = new OwnedBytes{std::make_unique<std::byte[]>(std::max<std::size_t>(at.size(), 1) * 8)};
    nb::capsule own = owning_capsule(positions);
    for (std::size_t k = 0; k < at.size(); ++k) {
      const std::int64_t v = at[k];
      std::memcpy(positions->data.get() + k * sizeof v, &v, sizeof v);
    }
    skipped = make_array(fw, positions->data.get(), {at.size()}, to_dlpack(stoker::DType::i64), nb::device::cpu::value,
                         0, own);
  }
  const std::span<const stoker::FieldView> fields = holder->fields();
  bool all_copied = true;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const stoker::FieldView& f = fields[i];
    const bool on_device = f.device.kind == stoker::Device::Kind::cuda;
    const int device_type = on_device ? nb::device::cuda::value : nb::device::cpu::value;
    const int device_id = on_device ? f.device.index : 0;
    nb::dlpack::dtype dtype = to_dlpack(f.dtype);
    const stoker::TransformField* ragged = names.ragged.at(i);
    // A bytes field's values, in rows of this many bytes: its elements (u8: bytes; i32 token ids),
    // or a ragged field's rows of its trailing dimensions.
    const std::size_t row = ragged ? row_bytes(*ragged) : stoker::dtype_size(f.dtype);
    std::vector<std::size_t> shape =
        f.kind == stoker::FieldKind::bytes ? std::vector<std::size_t>{f.bytes / row} : sizes(f.shape);
    if (ragged) {  // its values as rows of its dtype
      dtype = to_dlpack(ragged->dtype);
      for (std::size_t d = 1; d < ragged->shape.size(); ++d)
        shape.push_back(static_cast<std::size_t>(ragged->shape[d]));
    }
    const auto& [name, offsets_name] = names.keys.at(i);
    const bool copied = copy || f.bytes + f.offsets.size_bytes() <= kCopiedFieldBytes;
    all_copied = all_copied && copied;
    if (copied && on_device) {
      out[name] = make_array(fw, f.data, shape, dtype, device_type, device_id, owner).attr("clone")();
    } else if (copied) {
      auto* bytes = new OwnedBytes{std::make_unique<std::byte[]>(f.bytes > 0 ? f.bytes : 1)};
      nb::capsule own = owning_capsule(bytes);
      if (f.bytes > kCopiedFieldBytes) {
        GilRelease release;
        std::memcpy(bytes->data.get(), f.data, f.bytes);
      } else if (f.bytes > 0) {
        std::memcpy(bytes->data.get(), f.data, f.bytes);
      }
      out[name] = make_array(fw, bytes->data.get(), shape, dtype, device_type, device_id, own);
    } else {
      out[name] = make_array(fw, f.data, shape, dtype, device_type, device_id, owner);
    }
    if (f.kind == stoker::FieldKind::bytes) {
      const std::vector<std::size_t> oshape{f.offsets.size()};
      const nb::dlpack::dtype i64 = to_dlpack(stoker::DType::i64);  // offsets are below 2^63
      if (row != 1) {                                               // offsets in rows, in memory of their own
        auto* o = new OwnedBytes{std::make_unique<std::byte[]>(f.offsets.size_bytes())};
        nb::capsule own = owning_capsule(o);
        for (std::size_t k = 0; k < f.offsets.size(); ++k) {
          const auto v = static_cast<std::int64_t>(f.offsets[k] / row);
          std::memcpy(o->data.get() + k * sizeof v, &v, sizeof v);
        }
        out[offsets_name] = make_array(fw, o->data.get(), oshape, i64, nb::device::cpu::value, 0, own);
      } else if (copied) {
        auto* o = new OwnedBytes{std::make_unique<std::byte[]>(f.offsets.size_bytes())};
        nb::capsule own = owning_capsule(o);
        std::memcpy(o->data.get(), f.offsets.data(), f.offsets.size_bytes());
        out[offsets_name] = make_array(fw, o->data.get(), oshape, i64, nb::device::cpu::value, 0, own);
      } else {
        out[offsets_name] = make_array(fw, f.offsets.data(), oshape, i64, nb::device::cpu::value, 0, owner);
      }
    }
  }
  if (skipped.is_valid()) out[names.skipped] = skipped;
  if (all_copied && holder->device().kind != stoker::Device::Kind::cuda) holder->release();
  return out;
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
      GilRelease release;
      loader_ = std::make_shared<stoker::Loader>(std::move(o), keep_building);
    }
    keys_ = std::make_shared<const FieldKeys>(loader_->schema(), options.on_decode_error == "skip", options.transform);
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
    d["skipped_samples"] = s.skipped_samples;
    nb::list skipped;
    for (const std::uint64_t i : s.skipped_indices) skipped.append(i);
    d["skipped_indices"] = skipped;
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
  m.def("_at_exit", &at_exit, "Called by the package's atexit handler (see ExitGate in stoker_module.cc).");
  m.def("_set_leak_warnings", [](bool on) { nb::set_leak_warnings(on); });
  ::pthread_atfork(nullptr, nullptr, reset_gate_in_child);
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
      .def_rw("op_libraries", &PyOptions::op_libraries)
      .def_rw("trace", &PyOptions::trace)
      .def_rw("sources", &PyOptions::sources)
      .def_rw("max_open_shards", &PyOptions::max_open_shards)
      .def_rw("lmdb_keys", &PyOptions::lmdb_keys)
      .def_rw("lmdb_count_key", &PyOptions::lmdb_count_key)
      .def_rw("max_image_pixels", &PyOptions::max_image_pixels)
      .def_rw("on_decode_error", &PyOptions::on_decode_error)
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
      .def_rw("staging", &PyOptions::staging)
      // The transform: a Runner (python/stoker/_transform.py) run here without workers, the host's argv
      // and payload for workers, its fields as (name, dtype, shape, ragged, max_sample_bytes), and the
      // host already started (a StartedHost, or None).
      .def(
          "set_transform",
          [](PyOptions& p, nb::object runner, std::vector<std::string> host, const nb::bytes& payload,
             const nb::list& fields, std::shared_ptr<stoker::StartedHost> started) {
            stoker::Transform& t = p.transform;
            t.started = std::move(started);
            t.local = stoker_py::make_py_transform(std::move(runner));
            t.host = std::move(host);
            t.payload.assign(payload.c_str(), payload.size());
            t.fields.clear();
            for (nb::handle f : fields) {
              const auto dtype = stoker::parse_dtype(nb::cast<std::string>(f[1]));
              if (!dtype) throw stoker::Error(stoker::ErrorCode::invalid_option, "stoker: transform: unknown dtype");
              t.fields.push_back(stoker::TransformField{nb::cast<std::string>(f[0]), *dtype,
                                                        nb::cast<std::vector<std::int64_t>>(f[2]), nb::cast<bool>(f[3]),
                                                        nb::cast<std::uint64_t>(f[4])});
            }
          },
          nb::arg("runner"), nb::arg("host"), nb::arg("payload"), nb::arg("fields"), nb::arg("started").none())
      // Ends the started host unless a Loader took it: for a Loader that failed to build.
      .def("discard_transform_host", [](PyOptions& p) {
        if (p.transform.started) p.transform.started->discard();
      });
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
      .def(nb::init<const PyOptions&, const std::string&, bool, nb::object>(), nb::arg("options"), nb::arg("framework"),
           nb::arg("copy"), nb::arg("current_stream").none(), nb::call_guard<Inside>())
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
      .def("worker_pids", &PyLoader::worker_pids, nb::call_guard<Inside>())
      .def("schema", &PyLoader::schema, nb::call_guard<Inside>())
      .def("num_samples", &PyLoader::num_samples)
      .def("stats", &PyLoader::stats, nb::call_guard<Inside>())
      .def("close", &PyLoader::close, nb::call_guard<Inside>())
      .def_prop_ro("closed", &PyLoader::closed);
}
