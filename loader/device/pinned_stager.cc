#include "loader/device/pinned_stager.h"

#include <cstring>
#include <iostream>
#include <utility>

namespace stoker::detail {

PinnedStager::PinnedStager(DeviceBufferPool& pool) : pool_(pool), buffers_(2) {
  DeviceBackend& be = pool_.backend();
  try {
    for (Buffer& b : buffers_) {
      b.host = be.alloc_pinned(pool_.buffer_bytes());
      b.copied = be.create_event(false);
    }
  } catch (...) {
    destroy();
    throw;
  }
}

PinnedStager::~PinnedStager() { destroy(); }

void PinnedStager::destroy() noexcept {
  DeviceBackend& be = pool_.backend();
  for (Buffer& b : buffers_) {
    if (b.copied) {
      try {
        be.synchronize(b.copied);  // the copy engine may still read the buffer
      } catch (const std::exception& e) {
        std::cerr << "stoker: warning: " << e.what() << std::endl;
      }
      be.destroy_event(std::exchange(b.copied, nullptr));
    }
    if (b.host) be.free_pinned(std::exchange(b.host, nullptr));
  }
}

void PinnedStager::copy(Batch host, std::uint32_t id) {
  DeviceBackend& be = pool_.backend();
  Buffer& pin = buffers_[next_];
  next_ = (next_ + 1) % buffers_.size();
  if (pin.used) be.synchronize(pin.copied);  // its previous copy must have left the buffer
  auto* dst = static_cast<std::byte*>(pin.host);
  std::size_t end = 0;
  for (std::size_t f = 0; f < host.fields().size(); ++f) {
    const FieldView& v = host.fields()[f];
    std::memcpy(dst + pool_.offset(f), v.data, v.bytes);
    end = pool_.offset(f) + v.bytes;
  }
  host.release();  // the slot goes back to the workers now
  be.copy_to_device_async(pool_.device_memory(id), dst, end, pool_.copy_stream());
  be.record(pin.copied, pool_.copy_stream());
  pin.used = true;
}

}  // namespace stoker::detail
