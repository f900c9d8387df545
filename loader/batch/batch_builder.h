// BatchBuilder: the one way to make a stoker::Batch (stoker/batch.h), for the owners of batch
// memory: the slot pool (loader/shm) and the device buffer pool (loader/device).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "loader/batch/batch_owner.h"
#include "stoker/batch.h"

namespace stoker::detail {

class BatchBuilder {
 public:
  struct Parts {
    std::uint32_t id = 0;  // the owner's name for the memory: a slot, a device buffer
    Device device;
    void* ready_event = nullptr;  // staged devices: the copy's completion (a CUevent)
    std::uint64_t epoch = 0;
    std::uint64_t index = 0;
    std::span<const std::uint64_t> indices;  // live as long as the owner holds `id`
    std::span<const std::uint32_t> skipped;  // positions of skipped samples; as long as `indices`
    std::vector<FieldView> fields;
  };
  // The Batch of `parts`; destroying it calls owner->release(parts.id). REQUIRES: owner != null.
  static Batch make(std::shared_ptr<BatchOwner> owner, Parts parts) noexcept;
};

}  // namespace stoker::detail
