#include "base/posix_error.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include "base/env.h"
#include "stoker/error.h"

namespace stoker::detail {

ErrorCode open_error_code(int err) noexcept {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
    case EACCES:
    case EPERM:
    case ELOOP:
    case EISDIR:
    case ENAMETOOLONG:
    case ENXIO:
    case ENODEV: return ErrorCode::dataset;
    default: return ErrorCode::io;
  }
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev) return fmt::format("SIG{}", abbrev);
  return fmt::format("signal {}", sig);
}

std::string format_bytes(unsigned long long bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

void pread_exact(int fd, void* buf, std::size_t n, off_t offset, const std::string& path) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = Env::get().pread(fd, p, n, offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_errno(fmt::format("{}: read of {} bytes at offset {}", path, n, offset));
    }
    if (got == 0) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: unexpected end of file at offset {} (file truncated while in use?)", path, offset));
    }
    p += got;
    n -= static_cast<std::size_t>(got);
    offset += got;
  }
}

}  // namespace stoker::detail
