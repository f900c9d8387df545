// Stager: how a batch in a shared-memory slot gets into a device buffer (Options::staging).
//   pinned_copy     loader/device/pinned_stager.h
//   registered_shm  loader/device/registered_stager.h
// Used by the staging thread only.
#pragma once

#include <cstddef>
#include <memory>

#include "loader/device/device_buffer_pool.h"
#include "stoker/batch.h"
#include "stoker/device.h"

namespace stoker::detail {

class Stager {
 public:
  virtual ~Stager() = default;
  virtual Staging kind() const noexcept = 0;
  // Queues, on the pool's copy stream, the copy of `host`'s fields into buffer `id` (field f at
  // pool.offset(f)). Takes the host batch: its slot is released as soon as that is safe.
  virtual void copy(Batch host, std::uint32_t id) = 0;
  // Releases the slots whose copies have completed; with `wait_for_one`, waits for the oldest
  // first (when the workers would otherwise run out of slots).
  virtual void reclaim(bool /*wait_for_one*/) {}
  // Slots this stager still holds.
  virtual std::size_t slots_held() const noexcept { return 0; }
};

}  // namespace stoker::detail
