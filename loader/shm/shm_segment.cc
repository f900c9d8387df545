#include "loader/shm/shm_segment.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <boost/interprocess/anonymous_shared_memory.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <random>
#include <utility>

#include "base/env.h"
#include "base/posix_error.h"
#include "base/unique_fd.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace bip = boost::interprocess;
namespace {

std::string unique_name() {
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  return fmt::format("stoker-{}-{}-{:08x}", ::getpid(), counter++, rd());
}

// Boost reports the OS error it met; stoker's errors say what was attempted, with errno's text.
[[noreturn]] void throw_interprocess(const bip::interprocess_exception& e, const std::string& what) {
  const int native = e.get_native_error();
  if (native != 0) throw_errno(native, what);
  throw Error(ErrorCode::io, fmt::format("{}: {}", what, e.what()));
}

}  // namespace

std::optional<ShmSegment> ShmSegment::try_create_shared(std::size_t bytes, const std::string& shm_dir) {
  const std::string name = unique_name();
  std::optional<bip::shared_memory_object> shm;
  try {
    shm.emplace(bip::create_only, name.c_str(), bip::read_write, bip::permissions(0600));
  } catch (const bip::interprocess_exception& e) {
    throw_interprocess(e, fmt::format("creating shared memory {}/{}", shm_dir, name));
  }
  bip::shared_memory_object::remove(name.c_str());  // nothing to leak from here on
  const int fd = shm->get_mapping_handle().handle;
  // Boost opens without O_CLOEXEC; the descriptor lives only until the mapping exists.
  if (::fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) throw_errno(fmt::format("fcntl FD_CLOEXEC on {}/{}", shm_dir, name));
  // posix_fallocate returns the error instead of setting errno.
  const int rc = Env::get().posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc == ENOSPC || rc == ENOMEM) return std::nullopt;
  if (rc != 0) throw_errno(rc, fmt::format("reserving {} in {}", format_bytes(bytes), shm_dir));
  try {
    ShmSegment seg(bip::mapped_region(*shm, bip::read_write, 0, bytes), true);
    // Kept (Boost closes its own when the object goes): a fork server started by exec maps it.
    seg.fd_ = UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 3));
    if (!seg.fd_) throw_errno(fmt::format("dup of the shared memory descriptor {}/{}", shm_dir, name));
    seg.prefault();
    return seg;
  } catch (const bip::interprocess_exception& e) {
    throw_interprocess(e, fmt::format("mapping {} of shared memory", format_bytes(bytes)));
  }
}

std::optional<ShmSegment> ShmSegment::try_create_memfd(std::size_t bytes) {
  UniqueFd fd(::memfd_create("stoker-ring", MFD_CLOEXEC));
  if (!fd) throw_errno("memfd_create for the batch ring");
  // Reserved like the /dev/shm segment: the pages are charged now, so a later write cannot fault.
  const int rc = Env::get().posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes));
  if (rc == ENOSPC || rc == ENOMEM) return std::nullopt;
  if (rc != 0) throw_errno(rc, fmt::format("reserving {} of memfd memory", format_bytes(bytes)));
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) throw_errno(fmt::format("mapping {} of memfd memory", format_bytes(bytes)));
  ShmSegment seg(static_cast<std::byte*>(p), bytes);
  seg.fd_ = std::move(fd);
  seg.prefault();
  return seg;
}

ShmSegment ShmSegment::map_shared(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw_errno(fmt::format("mapping {} of the loader's shared memory", format_bytes(bytes)));
  return ShmSegment(static_cast<std::byte*>(p), bytes);
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept
    : region_(std::move(o.region_)),
      shared_(o.shared_),
      memfd_(std::exchange(o.memfd_, false)),
      memfd_data_(std::exchange(o.memfd_data_, nullptr)),
      memfd_size_(std::exchange(o.memfd_size_, 0)),
      fd_(std::move(o.fd_)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    if (memfd_data_) ::munmap(memfd_data_, memfd_size_);
    region_ = std::move(o.region_);
    shared_ = o.shared_;
    memfd_ = std::exchange(o.memfd_, false);
    memfd_data_ = std::exchange(o.memfd_data_, nullptr);
    memfd_size_ = std::exchange(o.memfd_size_, 0);
    fd_ = std::move(o.fd_);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  if (memfd_data_) ::munmap(memfd_data_, memfd_size_);
}

ShmSegment ShmSegment::create_private(std::size_t bytes) {
  try {
    ShmSegment seg(bip::anonymous_shared_memory(bytes), false);
    seg.prefault();
    return seg;
  } catch (const bip::interprocess_exception& e) {
    throw_interprocess(e, fmt::format("mapping {} of memory", format_bytes(bytes)));
  }
}

void ShmSegment::prefault() const noexcept {
  if (::madvise(data(), size(), MADV_POPULATE_WRITE) == 0) return;
  // Kernels before 5.14: read every page (a write could race with another process's). The memory
  // is reserved, so this cannot fault with SIGBUS.
  const long page = ::sysconf(_SC_PAGESIZE);
  for (std::size_t off = 0; off < size(); off += static_cast<std::size_t>(page)) {
    (void)reinterpret_cast<volatile const std::byte*>(data())[off];
  }
}

}  // namespace stoker::detail
