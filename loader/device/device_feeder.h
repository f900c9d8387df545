// DeviceFeeder: the staging thread between shared memory and a device.
//
// The staging thread takes host batches in order from the HostSource and, per batch, takes a free
// device buffer (loader/device/device_buffer_pool.h), has the Stager queue its copy on the copy stream
// (loader/device/stager.h), and queues the resulting device Batch (loader/device/staged_queue.h), at most
// prefetch_to_device ahead of the training loop. The user's thread starts epochs and pops batches.
// Data flows one way: HostSource -> Stager -> DeviceBufferPool -> StagedQueue -> user.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>

#include "loader/device/device_trace.h"
#include "stoker/batch.h"
#include "stoker/options.h"
#include "stoker/schema.h"
#include "stoker/stats.h"

namespace stoker::detail {

// The host pipeline the feeder draws from.
class HostSource {
 public:
  virtual ~HostSource() = default;
  // Starts `epoch` at global position `skip` of its order (a resumed state) and batch
  // `start_batch` of this rank's share.
  virtual std::uint64_t start_host_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip) = 0;
  virtual std::optional<Batch> next_host(std::uint64_t generation) = 0;
  // The memory batches live in (registered for Staging::registered_shm) and how many there are.
  virtual std::byte* slot_memory() const = 0;
  virtual std::size_t slot_memory_bytes() const = 0;
  virtual std::uint32_t depth() const = 0;
  // Makes a next_host() blocked in another thread throw at once (any thread; for shutdown).
  virtual void interrupt() noexcept = 0;
};

class DeviceBufferPool;
class StagedQueue;
class Stager;

class DeviceFeeder {
 public:
  // Creates the device backend (throws for a missing driver or device), the buffers, the stager
  // and the staging thread. With `trace` (outliving the feeder), the staging thread's batches, the
  // copies and the device's idle gaps go to it.
  DeviceFeeder(const Options& options, const Schema& schema, HostSource& source, DeviceTrace* trace = nullptr);
  ~DeviceFeeder();
  DeviceFeeder(const DeviceFeeder&) = delete;
  DeviceFeeder& operator=(const DeviceFeeder&) = delete;

  // The consumer (one thread at a time: the owner's consumer lock, loader/loader_impl.h).
  std::uint64_t start_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip);
  std::optional<Batch> next(std::uint64_t generation);
  // Whether next(generation) would not wait, waiting for that until `until`.
  bool wait_ready(std::uint64_t generation, std::chrono::steady_clock::time_point until);
  void add_stats(Stats& s) const;

 private:
  void run() noexcept;
  void stage_loop();
  Batch stage(Batch host, std::uint32_t buffer);

  HostSource& source_;
  DeviceTrace* trace_;
  std::shared_ptr<DeviceBufferPool> pool_;  // shared with the device batches
  std::shared_ptr<StagedQueue> queue_;      // the pool notifies it through a weak reference
  std::unique_ptr<Stager> stager_;          // staging thread only
  std::thread thread_;
};

}  // namespace stoker::detail
