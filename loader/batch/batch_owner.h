// BatchOwner: what a Batch returns its memory to — a shared-memory slot pool, or the device
// buffer pool of the staging pipeline. Owners outlive their batches (batches hold them shared).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace stoker::detail {

class BatchOwner {
 public:
  virtual ~BatchOwner() = default;
  // Any thread.
  virtual void release(std::uint32_t id) noexcept = 0;
  virtual void ready_on(std::uint32_t, void*) {}
  virtual void record_stream(std::uint32_t, void*) {}
  // Copies `bytes` of batch `id`'s memory at `src` (host memory, or device memory for a staged
  // batch, once its copy has landed) to host memory at `dst`.
  virtual void copy_to_host(std::uint32_t /*id*/, const std::byte* src, std::byte* dst, std::size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
  }
};

}  // namespace stoker::detail
