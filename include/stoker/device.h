// stoker/device.h: where a Loader delivers batches.
//
//   cpu()       batches are handed out straight from shared memory: no copy, no pinned memory.
//   cuda(i)     batches are staged through pinned host memory and copied to GPU i asynchronously,
//               on a stream of stoker's own, `prefetch_to_device` batches ahead of the training
//               loop. The NVIDIA driver is loaded at run time (libcuda.so.1): stoker needs no CUDA
//               toolkit and no newer driver than the user's LibTorch. Requesting a CUDA device on a
//               machine without one is an error at Loader construction.
//   emulated()  the CUDA pipeline with host memory as the "device" and a thread as the copy
//               engine; for testing code that uses the device path on machines without a GPU.
// Plain values; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stoker/export.h"

namespace stoker {

struct STOKER_API Device {
  enum class Kind : std::uint8_t { cpu, cuda, emulated };
  Kind kind = Kind::cpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {Kind::cuda, index}; }
  static Device emulated() { return {Kind::emulated, 0}; }
  // "cpu", "cuda", "cuda:1", "emulated"; throws stoker::Error for anything else.
  static Device parse(std::string_view text);

  // True when batches are copied away from shared memory (cuda, emulated).
  bool staged() const noexcept { return kind != Kind::cpu; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

// How the CUDA pipeline gets a batch from shared memory to the device.
enum class Staging : std::uint8_t {
  // memcpy into a pinned buffer, release the shared-memory slot at once, copy pinned -> device.
  pinned_copy,
  // register (page-lock) the shared-memory slots once and copy straight from them; a slot stays
  // held until its copy has completed. One host memcpy fewer. Where the platform refuses to
  // page-lock them: pinned_copy, with a warning.
  registered_shm,
  // registered_shm where the platform allows it, else pinned_copy without a warning
  // (Stats::staging says which). On an H200 registered_shm delivered 3.3x pinned_copy's GB/s
  // (docs/device.md).
  automatic,
};

}  // namespace stoker
