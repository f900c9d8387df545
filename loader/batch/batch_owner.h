// BatchOwner: what a Batch returns its memory to — a shared-memory slot pool, or the device
// buffer pool of the staging pipeline. Owners outlive their batches (batches hold them shared).
#pragma once

#include <cstdint>

namespace stoker::detail {

class BatchOwner {
 public:
  virtual ~BatchOwner() = default;
  // Any thread.
  virtual void release(std::uint32_t id) noexcept = 0;
  virtual void ready_on(std::uint32_t, void*) {}
  virtual void record_stream(std::uint32_t, void*) {}
};

}  // namespace stoker::detail
