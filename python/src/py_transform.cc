// A Python function as the Loader's transform (stoker/transform.h): the package's Runner
// (python/stoker/_transform_runner.py) is called once per sample with the sample's fields as read-only
// numpy arrays over the worker's memory and the four words the seed rule draws from (seed, epoch,
// index); it returns the declared fields as C-contiguous arrays, or the text of what went wrong.
// The same object serves the trainer (a Loader without workers) and each worker of a transform
// host, an exec of the trainer's interpreter (python/stoker/_transform_host.py).
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "exit_gate.h"
#include "stoker/error.h"

namespace stoker_py {
namespace {

// numpy's PCG64 state (numpy/random/src/pcg64/pcg64.h), written where its ctypes interface says
// it is: the same as assigning PCG64.state, without building the dict. The package checks the
// layout against that assignment once per Runner (python/stoker/_transform_runner.py) and passes 0 when it
// differs.
struct alignas(16) Uint128 {  // numpy's pcg128_t, a native 128-bit integer: low word first (x86-64, arm64)
  std::uint64_t low, high;
};
struct Pcg64Random {
  Uint128 state;
  Uint128 inc;
};
struct Pcg64State {
  Pcg64Random* pcg_state;
  int has_uint32;
  std::uint32_t uinteger;
};

void write_pcg_state(std::uintptr_t address, const std::array<std::uint64_t, 4>& w) noexcept {
  auto* s = reinterpret_cast<Pcg64State*>(address);  // NOLINT(performance-no-int-to-ptr): numpy gives an int
  s->pcg_state->state = {w[1], w[0]};
  s->pcg_state->inc = {w[3] | 1, w[2]};
  s->has_uint32 = 0;
  s->uinteger = 0;
}

// CPython's random.Random: its C part (Modules/_randommodule.c, RandomObject) after the object's
// header, seeded as random.seed(n) seeds it for 0 <= n < 2**32 (init_by_array with the key {n}).
// The package checks this against random.seed() once per Runner and passes 0 when it differs.
struct MtRandom {
  PyObject_HEAD int index;
  std::uint32_t state[624];
};

void seed_python_random(std::uintptr_t address, std::uint32_t n) noexcept {
  auto* random = reinterpret_cast<MtRandom*>(address);  // NOLINT(performance-no-int-to-ptr): Python's id()
  std::uint32_t* mt = random->state;
  mt[0] = 19650218u;  // init_genrand(19650218)
  for (std::uint32_t i = 1; i < 624; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i;
  std::uint32_t i = 1;
  for (int k = 624; k; --k) {  // init_by_array(key = {n}, length 1)
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + n;
    if (++i >= 624) {
      mt[0] = mt[623];
      i = 1;
    }
  }
  for (int k = 623; k; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - i;
    if (++i >= 624) {
      mt[0] = mt[623];
      i = 1;
    }
  }
  mt[0] = 0x80000000u;
  random->index = 624;
}

// SplitMix64's output function of z + its increment: what the seed rule is made of
// (docs/transform.md gives it in Python).
std::uint64_t mix(std::uint64_t z) noexcept {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr std::uint64_t kTransformStream = 0x7472616e73666f72ull;  // "transfor"

std::array<std::uint64_t, 4> seed_words(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index) noexcept {
  const std::uint64_t key = mix(mix(mix(seed ^ kTransformStream) ^ epoch) ^ index);
  return {mix(key), mix(key + 1), mix(key + 2), mix(key + 3)};
}

std::optional<stoker::DType> from_dlpack(nb::dlpack::dtype t) {
  if (t.lanes != 1) return std::nullopt;
  for (auto d : {stoker::DType::u8, stoker::DType::i8, stoker::DType::u16, stoker::DType::i16, stoker::DType::i32,
                 stoker::DType::i64, stoker::DType::f16, stoker::DType::f32, stoker::DType::f64, stoker::DType::b8,
                 stoker::DType::u32, stoker::DType::u64, stoker::DType::bf16}) {
    if (to_dlpack(d) == t) return d;
  }
  return std::nullopt;
}

class PyTransform final : public stoker::SampleTransform {
 public:
  explicit PyTransform(nb::object runner) : runner_(std::move(runner)) {
    seed_ = nb::cast<std::uint64_t>(runner_.attr("seed"));
    pcg_state_ = nb::cast<std::uintptr_t>(runner_.attr("pcg_state_address"));
    python_random_ = nb::cast<std::uintptr_t>(runner_.attr("python_random_address"));
    call_ = runner_.attr("call");
    for (nb::handle n : runner_.attr("names")) names_.push_back(nb::cast<std::string>(n));
  }
  ~PyTransform() override {
    if (!Py_IsInitialized()) {
      (void)call_.release();  // the interpreter is gone: nothing to give back
      (void)runner_.release();
      return;
    }
    if (!gate_hold()) {  // a daemon thread at the interpreter's exit: the runner is left, not freed
      (void)call_.release();
      (void)runner_.release();
      return;
    }
    struct Released {
      ~Released() { gate_release(); }
    } released;
    nb::gil_scoped_acquire acquire;
    call_.reset();
    runner_.reset();
  }

  void apply(std::span<const stoker::SampleField> in, std::uint64_t epoch, std::uint64_t index,
             stoker::SampleSink& out) override {
    if (!gate_hold()) {  // the interpreter is exiting: this batch ends, and the thread parks where it waits
      throw stoker::Error(stoker::ErrorCode::interrupted, "the interpreter is exiting");
    }
    struct Released {
      ~Released() { gate_release(); }
    } released;
    nb::gil_scoped_acquire acquire;
    std::string failure;
    try {
      call(in, epoch, index, out, failure);
    } catch (nb::python_error& e) {
      // What the runner lets through: KeyboardInterrupt, SystemExit and their kin. Ctrl-C in a
      // transform that runs in the trainer (no workers) is Ctrl-C: raised again where the loop
      // waits (the binding checks for signals before it reports an interrupted batch).
      if (e.matches(PyExc_KeyboardInterrupt)) {
        PyErr_SetInterrupt();
        throw stoker::Error(stoker::ErrorCode::interrupted, "interrupted (Ctrl-C) in the transform");
      }
      failure = e.what();
    }
    if (!failure.empty()) throw stoker::Error(stoker::ErrorCode::transform, failure);
  }

 private:
  void call(std::span<const stoker::SampleField> in, std::uint64_t epoch, std::uint64_t index, stoker::SampleSink& out,
            std::string& failure) {
    nb::dict sample;
    std::vector<std::size_t> shape;
    for (const stoker::SampleField& f : in) {
      shape.assign(f.shape.begin(), f.shape.end());
      nb::ndarray<nb::numpy, nb::ro> a(f.data.data(), shape.size(), shape.data(), nb::handle(), nullptr,
                                       to_dlpack(f.dtype));
      sample[nb::str(f.name.data(), f.name.size())] = a.cast();
    }
    const std::array<std::uint64_t, 4> w = seed_words(seed_, epoch, index);
    if (pcg_state_) write_pcg_state(pcg_state_, w);  // rng's, here: the Runner leaves it
    if (python_random_) seed_python_random(python_random_, static_cast<std::uint32_t>(w[2]));  // random's, too
    nb::object result = call_(sample, w[0], w[1], w[2], w[3]);
    if (nb::isinstance<nb::str>(result)) {
      failure = nb::cast<std::string>(result);
      return;
    }
    std::vector<std::int64_t> dims;
    for (std::size_t i = 0; i < names_.size(); ++i) {
      nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu> a;
      if (!nb::try_cast(result[i], a)) {
        failure = "the transform's field '" + names_[i] + "' is not an array stoker can read";
        return;
      }
      const std::optional<stoker::DType> dtype = from_dlpack(a.dtype());
      if (!dtype) {
        failure = "the transform's field '" + names_[i] + "' has a dtype stoker cannot deliver";
        return;
      }
      dims.assign(a.ndim(), 0);
      for (std::size_t d = 0; d < a.ndim(); ++d) dims[d] = static_cast<std::int64_t>(a.shape(d));
      const auto* data = static_cast<const std::byte*>(a.data());
      out.put(stoker::SampleField{names_[i], *dtype, dims, {data, a.nbytes()}});
    }
    result = nb::object();
    // The sample's arrays are views of the worker's memory, valid during the call: one the
    // transform kept (or a view of it) would read memory reused for other samples.
    if (Py_REFCNT(sample.ptr()) > 1) {
      failure = "the transform kept the sample's dict, whose arrays are valid during the call only: keep a copy";
      return;
    }
    for (auto [key, value] : sample) {
      if (Py_REFCNT(value.ptr()) > 1) {
        failure = "the transform kept field '" + nb::cast<std::string>(key) +
                  "' of the sample (or a view of it), an array over the worker's memory that is valid during the "
                  "call only: keep a copy (numpy.array(x)) instead";
        return;
      }
    }
  }

  nb::object runner_;
  nb::object call_;  // the Runner's call: the method that takes a sample
  std::uint64_t seed_ = 0;
  std::uintptr_t pcg_state_ = 0;      // numpy's PCG64 state of the Runner's rng; 0: the Runner seeds it
  std::uintptr_t python_random_ = 0;  // random's generator, seeded here where not 0 (seed_globals)
  std::vector<std::string> names_;
};

}  // namespace

std::shared_ptr<stoker::SampleTransform> make_py_transform(nb::object runner) {
  return std::make_shared<PyTransform>(std::move(runner));
}

void bind_transform(nb::module_& m) {
  m.def("_transform_seed_words", [](std::uint64_t seed, std::uint64_t epoch, std::uint64_t index) {
    const auto w = seed_words(seed, epoch, index);
    return std::vector<std::uint64_t>(w.begin(), w.end());
  });
  m.def("_write_pcg_state",
        [](std::uintptr_t address, std::uint64_t w0, std::uint64_t w1, std::uint64_t w2, std::uint64_t w3) {
          write_pcg_state(address, {w0, w1, w2, w3});
        });
  m.def("_mt_random_size", [] { return sizeof(MtRandom); });
  m.def("_mt_random_state_offset", [] { return offsetof(MtRandom, state); });
  m.def("_seed_python_random", [](std::uintptr_t address, std::uint32_t n) { seed_python_random(address, n); });
  // Never returns: the process serves a Loader's workers until the Loader ends (stoker/transform.h),
  // answering first the questions its StartedHost is asked, with answer(bytes) -> bytes.
  m.def("_serve_transform_host", [](const nb::object& build, const nb::object& answer) {
    const stoker::TransformFactory factory = [build](const std::string& payload) {
      try {
        return make_py_transform(build(nb::bytes(payload.data(), payload.size())));
      } catch (nb::python_error& e) {  // the user's pickle or modules, not stoker's invariants
        throw stoker::Error(stoker::ErrorCode::transform,
                            std::string("stoker: the transform's host could not rebuild the transform: ") + e.what());
      }
    };
    const stoker::TransformAnswer answers = [answer](const std::string& question) {
      try {
        const nb::bytes text = nb::cast<nb::bytes>(answer(nb::bytes(question.data(), question.size())));
        return std::string(text.c_str(), text.size());
      } catch (nb::python_error& e) {
        throw stoker::Error(stoker::ErrorCode::transform,
                            std::string("stoker: the transform's host could not answer: ") + e.what());
      }
    };
    // The interpreter's own bookkeeping around fork, as os.fork does it: its locks, and the at-fork
    // handlers modules registered (h5py's, random's).
    const stoker::ForkHooks hooks{[] { PyOS_BeforeFork(); }, [] { PyOS_AfterFork_Parent(); },
                                  [] { PyOS_AfterFork_Child(); }};
    stoker::serve_transform_host(factory, hooks, answers);
  });
}

}  // namespace stoker_py
