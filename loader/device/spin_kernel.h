// SpinKernel: a stand-in for a training step on a device stream: a kernel that spins for a set
// time (CUDA, from PTX the driver compiles: no toolkit needed), or a sleep queued on an emulated
// stream. Behind stoker/device_stream.h; the GPU check (bench/gpu_check.cc) uses it directly.
#pragma once

#include <memory>

#include "loader/device/device_backend.h"
#include "stoker/device.h"

namespace stoker::detail {

class SpinKernel {
 public:
  // REQUIRES: the device is current on the calling thread (DeviceBackend::bind_thread).
  explicit SpinKernel(const Device& device);
  ~SpinKernel() = default;  // the module lives as long as the context
  SpinKernel(const SpinKernel&) = delete;
  SpinKernel& operator=(const SpinKernel&) = delete;

  // Queues one step of `ms` milliseconds on `stream`.
  void launch(StreamHandle stream, double ms);

 private:
  Device device_;
  void* module_ = nullptr;
  void* function_ = nullptr;
};

}  // namespace stoker::detail
