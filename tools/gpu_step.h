// A simulated training step on a device stream: a kernel that spins for a set time (CUDA, from
// PTX the driver compiles: no toolkit needed), or a sleep queued on an emulated stream.
#pragma once

#include <memory>

#include "loader/device/device_backend.h"

namespace stoker::tools {

class GpuStep {
 public:
  // REQUIRES: the device is current on the calling thread (DeviceBackend::bind_thread).
  explicit GpuStep(const Device& device);
  ~GpuStep();
  GpuStep(const GpuStep&) = delete;
  GpuStep& operator=(const GpuStep&) = delete;

  // Queues one step of `ms` milliseconds on `stream`.
  void launch(detail::StreamHandle stream, double ms);

 private:
  Device device_;
  void* module_ = nullptr;
  void* function_ = nullptr;
};

}  // namespace stoker::tools
