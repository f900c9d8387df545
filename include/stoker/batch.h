// stoker/batch.h: one batch handed out by a Loader.
//
// A Batch owns one slot of the loader's ring. Its field views and indices point into that slot and
// stay valid until the Batch is destroyed or release() is called; destroying it returns the slot,
// on any thread, and may outlive the Loader. Move-only. Not synchronised: one thread uses a Batch
// at a time.
#pragma once

#include "stoker/export.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "stoker/device.h"
#include "stoker/dtype.h"

namespace stoker {

namespace detail {
class BatchOwner;
class SlotPool;
class DeviceBufferPool;
}

// One field of a batch: a C-order array [batch size, field shape...], in host memory or, for a
// staged device, in device memory.
struct FieldView {
  std::string_view name;
  Device device;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;  // shape[0] is the number of samples in the batch
  const std::byte* data = nullptr;
  std::size_t bytes = 0;

  // The elements as T; T's size must match the dtype's. Host memory only.
  template <class T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(data), bytes / sizeof(T)};
  }
};

class STOKER_API Batch {
 public:
  Batch() = default;
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch();

  // False for a default-constructed, moved-from or released Batch.
  explicit operator bool() const noexcept { return owner_ != nullptr; }

  std::uint64_t epoch() const noexcept { return epoch_; }
  // Position of this batch within its epoch (0-based).
  std::uint64_t index() const noexcept { return index_; }
  // Number of samples.
  std::size_t size() const noexcept { return indices_.size(); }
  // Dataset indices of the samples, in batch order.
  std::span<const std::uint64_t> indices() const noexcept { return indices_; }
  std::span<const FieldView> fields() const noexcept { return fields_; }
  // Throws stoker::Error naming the field and the ones present.
  const FieldView& field(std::string_view name) const;
  const FieldView& operator[](std::string_view name) const { return field(name); }

  // Returns the slot to the loader now; the views become invalid.
  void release() noexcept;

  // Where the field data is.
  const Device& device() const noexcept { return device_; }

  // Staged devices (CUDA): makes `stream` (a CUstream / cudaStream_t; 0 is the legacy default
  // stream) wait, on the device, until this batch's copy has landed — no host synchronisation — and
  // records the stream like record_stream(). The loader measures GPU idle time at these points.
  // CPU device: does nothing.
  void ready_on(void* stream);
  // Notes that work queued on `stream` reads this batch: its device buffer is reused only after
  // that work has finished, even when the Batch is destroyed earlier (like Tensor::record_stream).
  void record_stream(void* stream);
  // The event (CUevent) that completes when the data is on the device; null on the CPU device.
  void* ready_event() const noexcept { return ready_event_; }

 private:
  friend class detail::SlotPool;
  friend class detail::DeviceBufferPool;
  std::shared_ptr<detail::BatchOwner> owner_;
  std::uint32_t slot_ = 0;
  Device device_;
  void* ready_event_ = nullptr;
  std::uint64_t epoch_ = 0;
  std::uint64_t index_ = 0;
  std::span<const std::uint64_t> indices_;
  std::vector<FieldView> fields_;
};

}  // namespace stoker
