// DeviceFeeder: the staging pipeline between shared memory and a device.
//
// A staging thread takes batches in order from the host pipeline and, per batch:
//   pinned_copy:    memcpy into a pinned buffer (one of two, reused once their copy completed),
//                   release the shared-memory slot at once, one async H2D copy on the copy stream;
//   registered_shm: async H2D copies straight from the registered slot, which stays held until
//                   its copy has completed;
// then records the batch's ready event and queues the batch, at most prefetch_to_device ahead of
// the training loop. The device buffer it copies into is taken from a bounded pool
// (prefetch_to_device + 1 buffers: the queue plus the batch in the user's hands) and is reused
// only after the streams recorded on it reach the point of release (the copy stream waits on
// events recorded there; the host never waits on the hot path).
//
// Threads: the staging thread; the user's thread (start_epoch, next); any thread (Batch release).
// The pool's mutex guards the queue, the request and the buffers' bookkeeping.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <thread>

#include "stoker/batch.h"
#include "stoker/loader.h"
#include "stoker/options.h"
#include "stoker/schema.h"

namespace stoker::detail {

// The host pipeline the feeder draws from.
class HostSource {
 public:
  virtual ~HostSource() = default;
  virtual std::uint64_t start_host_epoch(std::uint64_t epoch, std::uint64_t start_batch) = 0;
  virtual std::optional<Batch> next_host(std::uint64_t generation) = 0;
  // The memory batches live in (registered for Staging::registered_shm) and how many there are.
  virtual std::byte* slot_memory() const = 0;
  virtual std::size_t slot_memory_bytes() const = 0;
  virtual std::uint32_t depth() const = 0;
  // Makes a next_host() blocked in another thread throw at once (any thread; for shutdown).
  virtual void interrupt() noexcept = 0;
};

class DeviceBufferPool;

class DeviceFeeder {
 public:
  // Creates the device backend (throws for a missing driver or device), the buffers and the
  // staging thread.
  DeviceFeeder(const Options& options, const Schema& schema, HostSource& source);
  ~DeviceFeeder();
  DeviceFeeder(const DeviceFeeder&) = delete;
  DeviceFeeder& operator=(const DeviceFeeder&) = delete;

  std::uint64_t start_epoch(std::uint64_t epoch, std::uint64_t start_batch);
  std::optional<Batch> next(std::uint64_t generation);
  void add_stats(Stats& s) const;

 private:
  void run() noexcept;
  void stage_loop();
  Batch stage(Batch host, std::uint32_t buffer);
  void release_copied(bool wait_for_one);

  Options options_;
  HostSource& source_;
  Staging staging_;
  std::shared_ptr<DeviceBufferPool> pool_;
  struct Pinned;
  std::vector<std::unique_ptr<Pinned>> pinned_;  // staging thread only
  std::size_t next_pinned_ = 0;
  struct Pending;
  std::vector<std::unique_ptr<Pending>> pending_;  // registered_shm: slots whose copy may be in flight
  bool registered_ = false;
  std::thread thread_;
};

}  // namespace stoker::detail
