// stoker/device_stream.h: a compute stream on a device, for programs that have no framework of
// their own to queue work there (loader-bench, checks, a training loop without LibTorch).
//
//   stoker::DeviceStream stream(opt.device);
//   for (stoker::Batch& b : loader.epoch(e)) {
//     b.ready_on(stream.handle());     // the stream waits for the batch's copy, on the device
//     stream.simulate_step(5.0);       // 5 ms of device work, a stand-in for a training step
//     stream.wait(stream.mark());      // a host wait, as a loop that reads its loss each step has
//   }
//
// With LibTorch use torch's streams instead (stoker/torch.h orders them itself). Not synchronised:
// one thread uses a DeviceStream at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "stoker/device.h"
#include "stoker/export.h"

namespace stoker {

class STOKER_API DeviceStream {
 public:
  // A stream of stoker's own on `device`, cuda(i) or emulated(), made current on the calling
  // thread. Throws stoker::Error (ErrorCode::device) for the CPU device, or where there is no
  // driver or no such device.
  explicit DeviceStream(const Device& device);
  // Waits for the work queued on the stream, then frees it.
  ~DeviceStream();
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;

  const Device& device() const noexcept;
  // The stream (a CUstream on CUDA, which is a cudaStream_t), for Batch::ready_on.
  void* handle() const noexcept;

  // Queues `milliseconds` of device work: a kernel that spins on the device's clock on CUDA
  // (compiled by the driver from PTX: no toolkit needed), a sleep on the emulated device.
  void simulate_step(double milliseconds);
  // Marks the work queued so far and returns the mark's number: 1, 2, ...
  std::uint64_t mark();
  // Blocks until the work queued before mark `n` is done; at once for a mark already waited for.
  void wait(std::uint64_t n);
  // Blocks until all the work queued so far is done.
  void synchronize();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker
