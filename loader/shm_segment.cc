#include "loader/shm_segment.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <random>

#include "stoker/error.h"
#include "util/posix_error.h"
#include "util/unique_fd.h"

namespace stoker::detail {
namespace {

std::string unique_name() {
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  return fmt::format("/stoker-{}-{}-{:08x}", ::getpid(), counter++, rd());
}

std::byte* map_or_throw(std::size_t bytes, int prot, int flags, int fd) {
  void* p = ::mmap(nullptr, bytes, prot, flags, fd, 0);
  if (p == MAP_FAILED) throw_errno(fmt::format("mmap of {} of shared memory", format_bytes(bytes)));
  return static_cast<std::byte*>(p);
}

}  // namespace

std::optional<ShmSegment> ShmSegment::try_create_shared(std::size_t bytes, const std::string& shm_dir) {
  std::string name = unique_name();
  UniqueFd fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) throw_errno(fmt::format("shm_open {}{}", shm_dir, name));
  ::shm_unlink(name.c_str());
  // posix_fallocate returns the error instead of setting errno.
  int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
  if (rc == ENOSPC || rc == ENOMEM) return std::nullopt;
  if (rc != 0) throw_errno(rc, fmt::format("reserving {} in {}", format_bytes(bytes), shm_dir));
  ShmSegment seg(map_or_throw(bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get()), bytes, true);
  seg.prefault();
  return seg;
}

ShmSegment ShmSegment::create_private(std::size_t bytes) {
  ShmSegment seg(map_or_throw(bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1), bytes, false);
  seg.prefault();
  return seg;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    shared_ = o.shared_;
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (data_) ::munmap(data_, size_);
}

void ShmSegment::prefault() const noexcept {
  if (::madvise(data_, size_, MADV_POPULATE_WRITE) == 0) return;
  // Kernels before 5.14: read every page (a write could race with another process's). The memory
  // is reserved, so this cannot fault with SIGBUS.
  const long page = ::sysconf(_SC_PAGESIZE);
  for (std::size_t off = 0; off < size_; off += static_cast<std::size_t>(page)) {
    (void)reinterpret_cast<volatile const std::byte*>(data_)[off];
  }
}

}  // namespace stoker::detail
