// stoker/batch.h: one batch handed out by a Loader.
//
// A Batch owns one slot of the loader's ring. Its field views and indices point into that slot and
// stay valid until the Batch is destroyed or release() is called; destroying it returns the slot,
// on any thread, and may outlive the Loader. Move-only. Not synchronised: one thread uses a Batch
// at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "stoker/device.h"
#include "stoker/dtype.h"
#include "stoker/export.h"
#include "stoker/schema.h"

namespace stoker {

namespace detail {
class BatchOwner;    // what a Batch returns its memory to
class BatchBuilder;  // how one is made
}  // namespace detail

// One field of a batch, in host memory or, for a staged device, in device memory.
//   fixed: a C-order array [batch size, field shape...] of `bytes` bytes.
//   bytes: the samples' bytes back to back in `data` (`bytes` in all), and offsets[0..B] with
//          sample k at [offsets[k], offsets[k+1]) of data; offsets[0] == 0, offsets[B] == bytes.
//          Offsets count bytes, whatever the dtype (the elements': u8, or i32 token ids, each
//          sample a whole number of them). Shape {B}. Host memory only.
struct FieldView {
  std::string_view name;
  Device device;
  FieldKind kind = FieldKind::fixed;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;  // shape[0] is the number of samples in the batch
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::span<const std::uint64_t> offsets;  // bytes fields only

  // The elements as T; T's size must match the dtype's. Host memory only.
  template <class T>
  std::span<const T> as() const {
    return {reinterpret_cast<const T*>(data), bytes / sizeof(T)};
  }
  // Sample k's bytes (either kind). Host memory only; REQUIRES k < shape[0].
  std::span<const std::byte> sample(std::size_t k) const {
    if (kind == FieldKind::bytes) return {data + offsets[k], static_cast<std::size_t>(offsets[k + 1] - offsets[k])};
    const std::size_t per = shape[0] > 0 ? bytes / static_cast<std::size_t>(shape[0]) : 0;
    return {data + k * per, per};
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
  // Positions in the batch (ascending) of the samples a pipeline could not decode, delivered with
  // zeros in that field (Options::on_decode_error = skip); empty otherwise. A training loop masks
  // them out of its loss by these, e.g. their labels.
  std::span<const std::uint32_t> skipped() const noexcept { return skipped_; }
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
  // Copies field f's `fields()[f].bytes` bytes to host memory at `dst`, from wherever they are:
  // shared memory, or the device (waiting for this batch's copy there to land). For checks and
  // digests; a training loop uses the data where it is. REQUIRES: f < fields().size().
  void copy_field_to_host(std::size_t f, void* dst) const;
  // The event (CUevent) that completes when the data is on the device; null on the CPU device.
  void* ready_event() const noexcept { return ready_event_; }

 private:
  friend class detail::BatchBuilder;
  std::shared_ptr<detail::BatchOwner> owner_;
  std::uint32_t slot_ = 0;
  Device device_;
  void* ready_event_ = nullptr;
  std::uint64_t epoch_ = 0;
  std::uint64_t index_ = 0;
  std::span<const std::uint64_t> indices_;
  std::span<const std::uint32_t> skipped_;
  std::vector<FieldView> fields_;
};

}  // namespace stoker
