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

#include "base/unique_fd.h"

namespace stoker::detail {

class ShmSegment {
 public:
  // nullopt when the shm filesystem or the memory cgroup cannot hold `bytes` (ENOSPC/ENOMEM);
  // throws stoker::Error for any other failure.
  static std::optional<ShmSegment> try_create_shared(std::size_t bytes, const std::string& shm_dir = "/dev/shm");
  // The same from memfd_create: memory counted against the memory cgroup, not against /dev/shm's
  // size. Boost.Interprocess has no memfd; the descriptor is stoker's own (closed once mapped).
  static std::optional<ShmSegment> try_create_memfd(std::size_t bytes);
  // Memory of this process alone, for a loader without worker processes.
  static ShmSegment create_private(std::size_t bytes);
  // Maps `bytes` of the shared memory `fd` refers to (a segment another process made and sent).
  static ShmSegment map_shared(int fd, std::size_t bytes);

  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::byte* data() const noexcept { return memfd_ ? memfd_data_ : static_cast<std::byte*>(region_.get_address()); }
  // memfd_: the mapping is stoker's own mmap (a memfd's, or one received), not a Boost region.
  std::size_t size() const noexcept { return memfd_ ? memfd_size_ : region_.get_size(); }
  bool shared() const noexcept { return shared_; }
  bool memfd() const noexcept { return memfd_; }

  // Maps every page into this process's page tables for writing (after fork a child has none).
  void prefault() const noexcept;
  // A descriptor of a shared segment's memory (close-on-exec), to send to a process that maps it
  // itself; -1 for private memory.
  int fd() const noexcept { return fd_.get(); }

 private:
  ShmSegment(boost::interprocess::mapped_region region, bool shared) : region_(std::move(region)), shared_(shared) {}
  ShmSegment(std::byte* data, std::size_t size) : shared_(true), memfd_(true), memfd_data_(data), memfd_size_(size) {}
  boost::interprocess::mapped_region region_;
  bool shared_ = false;
  bool memfd_ = false;  // then the mapping is memfd_data_, unmapped by the destructor
  std::byte* memfd_data_ = nullptr;
  std::size_t memfd_size_ = 0;
  UniqueFd fd_;
};

}  // namespace stoker::detail
