// The only translation unit that includes LibTorch.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstring>
#include <memory>

#include "stoker/error.h"
#include "stoker/torch.h"

namespace stoker {
namespace {

torch::Device torch_device(const Device& d) {
  if (d.kind == Device::Kind::cuda) return {torch::kCUDA, static_cast<c10::DeviceIndex>(d.index)};
  return torch::kCPU;  // the emulated device is host memory
}

// Makes the batch usable on torch's current stream (CUDA), or at all (emulated), without a host
// synchronisation on CUDA.
void make_ready(Batch& b) {
  switch (b.device().kind) {
    case Device::Kind::cpu: break;
    case Device::Kind::emulated: b.ready_on(nullptr); break;  // the host waits: it is the "device"
    case Device::Kind::cuda: {
      const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
      c10::Stream s = impl->getStream(torch_device(b.device()));
      b.ready_on(s.native_handle());
      break;
    }
  }
}

std::vector<std::int64_t> sizes(const FieldView& f) { return {f.shape.begin(), f.shape.end()}; }

}  // namespace

torch::Dtype torch_dtype(DType t) {
  switch (t) {
    case DType::u8: return torch::kUInt8;
    case DType::i8: return torch::kInt8;
    case DType::u16: return torch::kUInt16;
    case DType::i16: return torch::kInt16;
    case DType::i32: return torch::kInt32;
    case DType::i64: return torch::kInt64;
    case DType::f16: return torch::kFloat16;
    case DType::f32: return torch::kFloat32;
    case DType::f64: return torch::kFloat64;
    case DType::b8: return torch::kBool;
    case DType::u32: return torch::kUInt32;
    case DType::u64: return torch::kUInt64;
    case DType::bf16: return torch::kBFloat16;
  }
  throw Error(ErrorCode::invalid_option, "torch_dtype: unknown dtype");
}

std::string offsets_name(const FieldView& f) { return std::string(f.name) + ".offsets"; }

// A bytes field's offsets counted in its elements, in a tensor of their own (bytes: the slot's
// own words, which count bytes, could be aliased).
torch::Tensor element_offsets(const FieldView& f) {
  const auto element = static_cast<std::uint64_t>(dtype_size(f.dtype));
  torch::Tensor out = torch::empty({static_cast<std::int64_t>(f.offsets.size())}, torch::kInt64);
  auto* o = out.data_ptr<std::int64_t>();
  for (std::size_t k = 0; k < f.offsets.size(); ++k) o[k] = static_cast<std::int64_t>(f.offsets[k] / element);
  return out;
}

TensorMap to_tensors(Batch&& batch) {
  if (!batch) throw Error(ErrorCode::invalid_option, "to_tensors: the batch is empty (moved from or released)");
  auto holder = std::make_shared<Batch>(std::move(batch));
  make_ready(*holder);
  TensorMap out;
  for (const FieldView& f : holder->fields()) {
    if (f.kind == FieldKind::bytes) {
      const auto elements = static_cast<std::int64_t>(f.bytes / dtype_size(f.dtype));
      out.insert(std::string(f.name),
                 torch::from_blob(
                     const_cast<std::byte*>(f.data), {elements}, [holder](void*) {}, torch_dtype(f.dtype)));
      // Offsets are u64 in the slot; they are below 2^63, so the same words read as int64.
      out.insert(offsets_name(f), f.dtype != DType::u8 ? element_offsets(f)
                                                       : torch::from_blob(
                                                             const_cast<std::uint64_t*>(f.offsets.data()),
                                                             {static_cast<std::int64_t>(f.offsets.size())},
                                                             [holder](void*) {}, torch::kInt64));
      continue;
    }
    auto options = torch::TensorOptions().dtype(torch_dtype(f.dtype)).device(torch_device(f.device));
    // Every tensor's deleter holds the batch; the batch goes when the last tensor does.
    out.insert(std::string(f.name), torch::from_blob(
                                        const_cast<std::byte*>(f.data), sizes(f), [holder](void*) {}, options));
  }
  return out;
}

TensorMap copy_to_tensors(Batch&& batch) {
  if (!batch) throw Error(ErrorCode::invalid_option, "copy_to_tensors: the batch is empty (moved from or released)");
  Batch b = std::move(batch);
  make_ready(b);
  TensorMap out;
  for (const FieldView& f : b.fields()) {
    if (f.kind == FieldKind::bytes) {
      torch::Tensor flat =
          torch::empty({static_cast<std::int64_t>(f.bytes / dtype_size(f.dtype))}, torch_dtype(f.dtype));
      if (f.bytes) std::memcpy(flat.data_ptr(), f.data, f.bytes);
      out.insert(std::string(f.name), std::move(flat));
      out.insert(offsets_name(f), element_offsets(f));
      continue;
    }
    auto options = torch::TensorOptions().dtype(torch_dtype(f.dtype)).device(torch_device(f.device));
    torch::Tensor t = torch::empty(sizes(f), options);
    if (f.device.kind == Device::Kind::cuda) {
      // Queued on the current stream, which waits for the batch and is recorded for recycling.
      t.copy_(torch::from_blob(const_cast<std::byte*>(f.data), sizes(f), options), /*non_blocking=*/true);
    } else {
      std::memcpy(t.data_ptr(), f.data, f.bytes);
    }
    out.insert(std::string(f.name), std::move(t));
  }
  return out;  // `b` is released here
}

std::vector<torch::Tensor> split_bytes(const torch::Tensor& flat, const torch::Tensor& offsets) {
  if (flat.dim() != 1 || offsets.dim() != 1 || offsets.scalar_type() != torch::kInt64 || offsets.numel() < 1) {
    throw Error(ErrorCode::invalid_option,
                "split_bytes: needs a 1-D flat tensor and a 1-D int64 offsets tensor of B+1 entries");
  }
  const torch::Tensor o = offsets.to(torch::kCPU);
  const auto* p = o.data_ptr<std::int64_t>();
  std::vector<torch::Tensor> out;
  out.reserve(static_cast<std::size_t>(o.numel() - 1));
  for (std::int64_t k = 0; k + 1 < o.numel(); ++k) {
    if (p[k] < 0 || p[k + 1] < p[k] || p[k + 1] > flat.numel()) {
      // No fmt here: LibTorch's headers bring a fmt of their own.
      throw Error(ErrorCode::invalid_option, "split_bytes: offsets " + std::to_string(p[k]) + " .. " +
                                                 std::to_string(p[k + 1]) + " of sample " + std::to_string(k) +
                                                 " are not within the " + std::to_string(flat.numel()) + " values");
    }
    out.push_back(flat.narrow(0, p[k], p[k + 1] - p[k]));
  }
  return out;
}

}  // namespace stoker
