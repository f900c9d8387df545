// DeviceBufferPool: the device buffers staged batches live in, and who may reuse them when.
//
// A buffer holds one batch, its fields one after the other at 256-byte aligned offsets. It is
// free, being filled by the staging thread (acquired), or held by a live device Batch. A released
// buffer is reused only after the work the user queued on it is done, without a host wait: at
// release an event is recorded on every stream the batch was used on (ready_on, record_stream),
// and the next copy into the buffer waits for those events on the copy stream.
//
// Shared by the feeder and every device Batch (which may outlive the Loader); it owns the device
// backend, so the backend lives as long as any batch. Thread-safe; its mutex is never held while
// calling out (on_free runs after it is released).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "loader/batch/batch_owner.h"
#include "loader/device/device_backend.h"
#include "loader/device/device_timeline.h"
#include "loader/device/device_trace.h"
#include "loader/device/gpu_idle_meter.h"
#include "stoker/batch.h"
#include "stoker/schema.h"

namespace stoker::detail {

class DeviceBufferPool final : public BatchOwner, public std::enable_shared_from_this<DeviceBufferPool> {
 public:
  // `count` buffers for batches of up to `batch_size` samples of `schema`, and the copy stream.
  // Everything made so far is freed again when a later allocation throws.
  DeviceBufferPool(std::unique_ptr<DeviceBackend> backend, const Schema& schema, std::size_t batch_size,
                   std::size_t count);
  ~DeviceBufferPool() override;
  DeviceBufferPool(const DeviceBufferPool&) = delete;
  DeviceBufferPool& operator=(const DeviceBufferPool&) = delete;

  DeviceBackend& backend() noexcept { return *backend_; }
  GpuIdleMeter& idle_meter() noexcept { return *meter_; }
  StreamHandle copy_stream() const noexcept { return copy_stream_; }
  std::size_t size() const noexcept { return buffers_.size(); }
  std::size_t buffer_bytes() const noexcept { return buffer_bytes_; }
  std::size_t offset(std::size_t field) const noexcept { return offsets_[field]; }
  std::byte* device_memory(std::uint32_t id) const noexcept { return buffers_[id].device; }

  // Called, outside the pool's lock, whenever a buffer becomes free.
  void set_on_free(std::function<void()> on_free) { on_free_ = std::move(on_free); }

  std::optional<std::uint32_t> try_acquire();
  // Returns an acquired buffer that did not become a batch.
  void give_back(std::uint32_t id);
  bool has_free() const;
  bool all_held() const;

  // Staging thread. Before copying into buffer `id`: makes the copy stream wait for the work its
  // previous users queued on it, and starts timing the copy.
  void begin_copy(std::uint32_t id);
  // After the copy of `bytes` (batch `index`) into buffer `id` was queued: the batch is ready when
  // the copy stream gets here.
  void end_copy(std::uint32_t id, std::uint64_t bytes, std::uint64_t index);
  // From now on (staging thread, before any copy), each copy timed and each gap the idle meter
  // measures is also a span on `trace`, placed on the host's clock by a DeviceTimeline; nullptr
  // (once the staging thread is done): the copies that have landed are traced, then no more.
  // `trace` outlives its use here.
  void set_trace(DeviceTrace* trace);
  // The device Batch for buffer `id`, after end_copy. `host_fields` describe the copied fields.
  Batch make_batch(std::uint32_t id, std::uint64_t epoch, std::uint64_t index, std::span<const std::uint64_t> indices,
                   std::span<const FieldView> host_fields, std::span<const std::uint32_t> skipped = {});

  struct CopyTotals {
    std::uint64_t bytes = 0;
    double seconds = 0;  // copy-engine time of the copies timed so far
  };
  CopyTotals copy_totals() const;

  // BatchOwner: any thread.
  void release(std::uint32_t id) noexcept override;
  void record_stream(std::uint32_t id, void* stream) override;
  void ready_on(std::uint32_t id, void* stream) override;
  // Waits for buffer `id`'s copy to land, then copies from the device.
  void copy_to_host(std::uint32_t id, const std::byte* src, std::byte* dst, std::size_t bytes) override;

 private:
  struct Buffer {
    std::byte* device = nullptr;
    EventHandle ready = nullptr;                           // the copy into it landed
    EventHandle copy_start = nullptr, copy_end = nullptr;  // timing of that copy
    bool copy_timed = false;                               // start/end recorded, not yet harvested
    std::uint64_t copied_batch = 0, copied_bytes = 0;      // what that copy held (the trace)
    std::vector<StreamHandle> streams;                     // used on while held
    std::vector<EventHandle> release_events;               // recorded on those streams at release
    std::vector<std::uint64_t> indices;
    std::vector<std::uint32_t> skipped;
    bool free = true;
  };
  void destroy() noexcept;
  // Folds buffer b's timed copy into the totals (and the trace) if it has landed. REQUIRES: mu_
  void harvest_copy(Buffer& b);

  std::unique_ptr<DeviceBackend> backend_;
  std::unique_ptr<GpuIdleMeter> meter_;
  Schema schema_;
  std::vector<std::size_t> offsets_;
  std::size_t buffer_bytes_ = 0;
  StreamHandle copy_stream_ = nullptr;
  std::function<void()> on_free_;

  mutable std::mutex mu_;  // guards everything below, and the buffers' bookkeeping
  std::vector<Buffer> buffers_;
  std::vector<std::uint32_t> free_list_;
  std::size_t held_ = 0;
  CopyTotals copies_;
  DeviceTrace* trace_ = nullptr;              // Options::trace's device tracks, while staging
  std::unique_ptr<DeviceTimeline> timeline_;  // made with the first trace; before backend_ goes
};

}  // namespace stoker::detail
