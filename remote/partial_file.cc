#include "remote/partial_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace stoker::remote {

std::string write_error(const std::string& name, int err, std::uint64_t at, std::uint64_t size) {
  return fmt::format("writing the download of {}: {} ({} of its {} bytes still to come)", name, std::strerror(err),
                     size - std::min(at, size), size);
}

int reserve_blocks(int fd, std::uint64_t from, std::uint64_t size) noexcept {
  if (from >= size) return 0;
  int e = 0;
  do {
    const bool reserved =
        ::fallocate(fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from), static_cast<off_t>(size - from)) == 0;
    e = reserved ? 0 : errno;
  } while (e == EINTR);
  if (e == 0 || e == EOPNOTSUPP || e == ENOSYS || e == EINVAL) return 0;
  release_reserved(fd, from);  // ext4 and XFS keep what a failed reservation got
  return e;
}

void release_reserved(int fd, std::uint64_t size) noexcept { (void)::ftruncate(fd, static_cast<off_t>(size)); }

int write_all(int fd, const char* data, std::size_t n, std::uint64_t at, std::uint64_t& written) noexcept {
  written = 0;
  while (written < n) {
    const ssize_t w = ::pwrite(fd, data + written, n - written, static_cast<off_t>(at + written));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? errno : ENOSPC;
    written += static_cast<std::uint64_t>(w);
  }
  return 0;
}

std::uint64_t allocated_bytes(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_blocks) * 512 : 0;
}

}  // namespace stoker::remote
