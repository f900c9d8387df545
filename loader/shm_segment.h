// ShmSegment: one mapping of shared memory, reserved and pre-faulted up front.
//
// Shared segments are Boost.Interprocess objects: a shared_memory_object created under a unique
// name and removed at once (so no /dev/shm entry outlives the loader, even when the process is
// SIGKILLed; children inherit the mapping through fork), reserved with posix_fallocate on its
// native handle (truncate, Boost's or ftruncate, reserves nothing, and a write past the real free
// space is SIGBUS), then mapped as a mapped_region and touched once. Private segments (a loader
// without workers) are Boost's anonymous shared memory. Move-only; the region unmaps on
// destruction.
#pragma once

#include <boost/interprocess/mapped_region.hpp>
#include <cstddef>
#include <optional>
#include <string>

namespace stoker::detail {

class ShmSegment {
 public:
  // nullopt when the shm filesystem or the memory cgroup cannot hold `bytes` (ENOSPC/ENOMEM);
  // throws stoker::Error for any other failure.
  static std::optional<ShmSegment> try_create_shared(std::size_t bytes, const std::string& shm_dir = "/dev/shm");
  // Memory of this process alone, for a loader without worker processes.
  static ShmSegment create_private(std::size_t bytes);

  ShmSegment(ShmSegment&&) noexcept = default;
  ShmSegment& operator=(ShmSegment&&) noexcept = default;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::byte* data() const noexcept { return static_cast<std::byte*>(region_.get_address()); }
  std::size_t size() const noexcept { return region_.get_size(); }
  bool shared() const noexcept { return shared_; }

  // Maps every page into this process's page tables for writing (after fork a child has none).
  void prefault() const noexcept;

 private:
  ShmSegment(boost::interprocess::mapped_region region, bool shared) : region_(std::move(region)), shared_(shared) {}
  boost::interprocess::mapped_region region_;
  bool shared_ = false;
};

}  // namespace stoker::detail
