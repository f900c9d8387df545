// RegisteredStager (Staging::registered_shm): the shared-memory slots are page-locked once and
// copied to the device straight from there, one host memcpy fewer than pinned_copy. A slot stays
// held until its copy completed (an event per batch), so the workers have fewer free slots: the
// staging thread reclaims completed ones before asking for the next batch and waits for the
// oldest when only one slot would be left.
#pragma once

#include <deque>
#include <memory>

#include "loader/device/stager.h"

namespace stoker::detail {

class RegisteredStager final : public Stager {
 public:
  // nullptr when the platform refuses to page-lock the memory.
  static std::unique_ptr<RegisteredStager> try_create(DeviceBufferPool& pool, std::byte* slots, std::size_t bytes);
  ~RegisteredStager() override;

  Staging kind() const noexcept override { return Staging::registered_shm; }
  void copy(Batch host, std::uint32_t id) override;
  void reclaim(bool wait_for_one) override;
  std::size_t slots_held() const noexcept override { return pending_.size(); }

 private:
  RegisteredStager(DeviceBufferPool& pool, std::byte* slots) : pool_(pool), slots_(slots) {}
  struct Pending {
    Batch host;
    EventHandle copied = nullptr;
  };

  DeviceBufferPool& pool_;
  std::byte* slots_;
  std::deque<Pending> pending_;  // copies possibly in flight, oldest first
};

}  // namespace stoker::detail
