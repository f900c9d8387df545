// Errors from OS calls as stoker::Error (Error::from_errno: "context: strerror (ENAME)"), and the
// small conventions around them: signal names, byte sizes, exact reads.
#pragma once

#include <sys/types.h>

#include <cerrno>
#include <cstddef>
#include <string>

#include "stoker/error.h"

namespace stoker::detail {

[[noreturn]] inline void throw_errno(int err, const std::string& context, ErrorCode code = ErrorCode::io) {
  throw Error::from_errno(err, context, code);
}
[[noreturn]] inline void throw_errno(const std::string& context, ErrorCode code = ErrorCode::io) {
  throw_errno(errno, context, code);
}

// The code of a failure to open or stat a dataset's file: the path's own problems (missing, not
// readable, not a file) are the dataset's; the rest (EMFILE, ENOMEM, EIO, ...) are the system's.
ErrorCode open_error_code(int err) noexcept;
// throw_errno(err, path, open_error_code(err)).
[[noreturn]] inline void throw_open_errno(int err, const std::string& path) {
  throw_errno(err, path, open_error_code(err));
}
[[noreturn]] inline void throw_open_errno(const std::string& path) { throw_open_errno(errno, path); }

// Name of a signal ("SIGKILL"), or "signal N".
std::string signal_name(int sig);

// "12.0 MiB"
std::string format_bytes(unsigned long long bytes);

// Reads exactly n bytes at `offset` (retrying short reads and EINTR). Throws naming `path`: an OS
// error (ErrorCode::io), or an unexpected end of file (ErrorCode::dataset: the file was truncated).
void pread_exact(int fd, void* buf, std::size_t n, off_t offset, const std::string& path);

}  // namespace stoker::detail
