// PinnedStager (Staging::pinned_copy): each batch is copied by the CPU into one of two pinned host
// buffers, its shared-memory slot is released at once, and one async copy takes the buffer to the
// device. Two buffers: one fills while the other's copy runs; a buffer is refilled only after its
// previous copy completed.
#pragma once

#include <vector>

#include "loader/device/stager.h"

namespace stoker::detail {

class PinnedStager final : public Stager {
 public:
  explicit PinnedStager(DeviceBufferPool& pool);
  ~PinnedStager() override;

  Staging kind() const noexcept override { return Staging::pinned_copy; }
  void copy(Batch host, std::uint32_t id) override;

 private:
  struct Buffer {
    void* host = nullptr;
    EventHandle copied = nullptr;
    bool used = false;
  };
  void destroy() noexcept;

  DeviceBufferPool& pool_;
  std::vector<Buffer> buffers_;
  std::size_t next_ = 0;
};

}  // namespace stoker::detail
