// ShmSegment: one mapping of shared memory, reserved and pre-faulted up front.
//
// POSIX shared memory is created under a unique name, unlinked at once (so no /dev/shm entry
// outlives the loader, even when the process is SIGKILLed; children inherit the mapping through
// fork), reserved with posix_fallocate (ftruncate reserves nothing, and a write past the real free
// space is SIGBUS), then mapped and touched once. Move-only; unmaps on destruction.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace stoker::detail {

class ShmSegment {
 public:
  // nullopt when the shm filesystem or the memory cgroup cannot hold `bytes` (ENOSPC/ENOMEM);
  // throws stoker::Error for any other failure.
  static std::optional<ShmSegment> try_create_shared(std::size_t bytes, const std::string& shm_dir = "/dev/shm");
  // Private anonymous memory, for a loader without worker processes.
  static ShmSegment create_private(std::size_t bytes);

  ShmSegment(ShmSegment&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), shared_(o.shared_) {}
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool shared() const noexcept { return shared_; }

  // Maps every page into this process's page tables for writing (after fork a child has none).
  void prefault() const noexcept;

 private:
  ShmSegment(std::byte* data, std::size_t size, bool shared) : data_(data), size_(size), shared_(shared) {}
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool shared_ = false;
};

}  // namespace stoker::detail
