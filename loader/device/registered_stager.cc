#include "loader/device/registered_stager.h"

#include <iostream>

namespace stoker::detail {

std::unique_ptr<RegisteredStager> RegisteredStager::try_create(DeviceBufferPool& pool, std::byte* slots,
                                                               std::size_t bytes) {
  if (!pool.backend().register_host(slots, bytes)) return nullptr;
  return std::unique_ptr<RegisteredStager>(new RegisteredStager(pool, slots));
}

RegisteredStager::~RegisteredStager() {
  DeviceBackend& be = pool_.backend();
  for (Pending& p : pending_) {
    try {
      be.synchronize(p.copied);
    } catch (const std::exception& e) {
      std::cerr << "stoker: warning: " << e.what() << std::endl;
    }
    be.destroy_event(p.copied);
  }
  pending_.clear();  // releases the slots
  be.unregister_host(slots_);
}

void RegisteredStager::copy(Batch host, std::uint32_t id) {
  DeviceBackend& be = pool_.backend();
  for (std::size_t f = 0; f < host.fields().size(); ++f) {
    const FieldView& v = host.fields()[f];
    be.copy_to_device_async(pool_.device_memory(id) + pool_.offset(f), v.data, v.bytes, pool_.copy_stream());
  }
  EventHandle copied = be.create_event(false);
  be.record(copied, pool_.copy_stream());
  pending_.push_back({std::move(host), copied});  // the slot is held until its copy completed
}

void RegisteredStager::reclaim(bool wait_for_one) {
  DeviceBackend& be = pool_.backend();
  if (wait_for_one && !pending_.empty()) be.synchronize(pending_.front().copied);
  while (!pending_.empty() && be.query(pending_.front().copied)) {
    be.destroy_event(pending_.front().copied);
    pending_.pop_front();  // releases the slot
  }
}

}  // namespace stoker::detail
