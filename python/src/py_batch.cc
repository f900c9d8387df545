#include "py_batch.h"

#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstring>
#include <memory>

#include "binding.h"
#include "exit_gate.h"

namespace stoker_py {
namespace {

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

}  // namespace

Arrays arrays_for(Framework fw) {
  Arrays a;
  a.framework = fw;
  if (fw == Framework::torch) {
    nb::module_ c = nb::module_::import_("torch._C");
    a.from_dlpack = nb::hasattr(c, "_from_dlpack") ? c.attr("_from_dlpack")
                                                   : nb::module_::import_("torch.utils.dlpack").attr("from_dlpack");
    nb::module_ profiler = nb::module_::import_("torch.autograd.profiler");
    nb::object autograd = c.attr("_autograd");
    if (nb::hasattr(autograd, "_profiler_enabled")) {
      a.profiler_enabled = autograd.attr("_profiler_enabled");
      a.record_function = profiler.attr("record_function");
      if (nb::hasattr(profiler, "_is_profiler_enabled")) {
        a.profiler_globals = profiler.attr("__dict__");
        a.profiler_flag = nb::str("_is_profiler_enabled");
      }
    }
  }
  return a;
}

bool Arrays::profiling() const {
  if (!profiler_enabled.is_valid()) return false;
  if (profiler_globals.is_valid()) {
    // Borrowed; absent (deleted by someone) reads as not recording.
    PyObject* on = PyDict_GetItemWithError(profiler_globals.ptr(), profiler_flag.ptr());
    if (on == nullptr && PyErr_Occurred() != nullptr) throw nb::python_error();
    if (on != Py_True) return false;
  }
  return nb::cast<bool>(profiler_enabled());  // per thread: this one may not be the one profiled
}

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

}  // namespace stoker_py
