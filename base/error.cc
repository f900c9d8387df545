// stoker::Error (stoker/error.h): the names of its codes, and errors of operating-system calls.
#include "stoker/error.h"

#include <fmt/format.h>
#include <string.h>

namespace stoker {

std::string_view error_code_name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_option: return "invalid_option";
    case ErrorCode::dataset: return "dataset";
    case ErrorCode::io: return "io";
    case ErrorCode::shm: return "shm";
    case ErrorCode::worker_died: return "worker_died";
    case ErrorCode::worker_stuck: return "worker_stuck";
    case ErrorCode::slots_held: return "slots_held";
    case ErrorCode::device: return "device";
    case ErrorCode::state_mismatch: return "state_mismatch";
    case ErrorCode::interrupted: return "interrupted";
    case ErrorCode::wrong_process: return "wrong_process";
    case ErrorCode::internal: return "internal";
    case ErrorCode::transform: return "transform";
  }
  return "unknown";
}

ErrorCode error_code_from_wire(std::uint64_t code) noexcept {
  const bool known = code >= static_cast<std::uint64_t>(ErrorCode::invalid_option) &&
                     code <= static_cast<std::uint64_t>(ErrorCode::transform);
  return known ? static_cast<ErrorCode>(code) : ErrorCode::internal;
}

Error Error::from_errno(int err, const std::string& context, ErrorCode code) {
  const char* name = strerrorname_np(err);
  return Error(code, fmt::format("{}: {} ({})", context, strerror(err), name ? name : "?"));
}

}  // namespace stoker
