// Errors from OS calls as stoker::Error, "context: strerror (ENAME)".
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

#include "stoker/export.h"

namespace stoker {

[[noreturn]] STOKER_TOOLS_API void throw_errno(int err, const std::string& context);
[[noreturn]] inline void throw_errno(const std::string& context);

// Name of a signal ("SIGKILL"), or "signal N".
STOKER_TOOLS_API std::string signal_name(int sig);

// "12.0 MiB"
STOKER_TOOLS_API std::string format_bytes(unsigned long long bytes);

// Reads exactly n bytes at `offset` (retrying short reads and EINTR). Throws naming `path` on an
// error or an unexpected end of file.
STOKER_TOOLS_API void pread_exact(int fd, void* buf, std::size_t n, off_t offset, const std::string& path);

}  // namespace stoker

#include <cerrno>

namespace stoker {
[[noreturn]] inline void throw_errno(const std::string& context) { throw_errno(errno, context); }
}  // namespace stoker
