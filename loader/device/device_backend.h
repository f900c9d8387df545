// DeviceBackend: the few device operations the staging pipeline needs, so that the pipeline's
// logic (ordering, recycling, events) is one piece of code for CUDA and for the emulated device
// the tests run on the CPU.
//
// Streams and events are opaque handles (for CUDA: CUstream and CUevent, interchangeable with
// cudaStream_t / cudaEvent_t and torch's streams). Thread-safety: every method may be called from
// any thread; implementations make their device current themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "stoker/device.h"

namespace stoker::detail {

using StreamHandle = void*;
using EventHandle = void*;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  virtual const Device& device() const = 0;

  // Makes the device current on the calling thread (the staging thread calls it first).
  virtual void bind_thread() = 0;

  virtual void* alloc_pinned(std::size_t bytes) = 0;
  virtual void free_pinned(void* p) noexcept = 0;
  virtual std::byte* alloc_device(std::size_t bytes) = 0;
  virtual void free_device(std::byte* p) noexcept = 0;
  // Page-locks existing host memory for direct copies; false when the platform refuses.
  virtual bool register_host(void* p, std::size_t bytes) = 0;
  virtual void unregister_host(void* p) noexcept = 0;

  // A non-blocking stream of stoker's own.
  virtual StreamHandle create_stream() = 0;
  virtual void destroy_stream(StreamHandle s) noexcept = 0;
  // Events for ordering: waits on them block the thread instead of spinning.
  virtual EventHandle create_event(bool timing = false) = 0;
  virtual void destroy_event(EventHandle e) noexcept = 0;

  virtual void copy_to_device_async(std::byte* dst, const void* src, std::size_t bytes, StreamHandle s) = 0;
  virtual void copy_to_host(void* dst, const std::byte* src, std::size_t bytes) = 0;  // synchronous; checks only
  virtual void record(EventHandle e, StreamHandle s) = 0;
  virtual void stream_wait(StreamHandle s, EventHandle e) = 0;
  virtual bool query(EventHandle e) = 0;  // completed?
  virtual void synchronize(EventHandle e) = 0;
  virtual double elapsed_seconds(EventHandle from, EventHandle to) = 0;  // both completed, timing events
};

// The backend for `device`: CUDA (the driver loaded once, at the first request) or the emulated
// device. Throws stoker::Error naming the device and what is missing.
std::unique_ptr<DeviceBackend> make_device_backend(const Device& device);

// The emulated device's streams, for tests that act as the "training loop".
std::unique_ptr<DeviceBackend> make_emulated_backend();

}  // namespace stoker::detail
