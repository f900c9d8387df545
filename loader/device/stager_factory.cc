#include "loader/device/stager_factory.h"

#include "loader/device/pinned_stager.h"
#include "loader/device/registered_stager.h"

namespace stoker::detail {

std::unique_ptr<Stager> make_stager(Staging staging, DeviceBufferPool& pool, std::byte* slots, std::size_t bytes,
                                    const std::function<void(const std::string&)>& warn) {
  if (staging != Staging::pinned_copy) {
    if (auto registered = RegisteredStager::try_create(pool, slots, bytes)) return registered;
    // Asked for by name, its absence is news; the default takes what the platform allows.
    if (staging == Staging::registered_shm)
      warn("cannot page-lock the shared-memory slots; staging through pinned buffers instead");
  }
  return std::make_unique<PinnedStager>(pool);
}

}  // namespace stoker::detail
