// Waiting with a deadline, the one way stoker waits on descriptors: poll() retried on EINTR with
// the time that is left, never for longer than asked and never forever by accident.
#pragma once

#include <poll.h>

#include <chrono>

namespace stoker::detail {

using Clock = std::chrono::steady_clock;

// A deadline `timeout` from now; a negative timeout is none (Clock::time_point::max()).
Clock::time_point deadline_in(std::chrono::milliseconds timeout) noexcept;

// poll() on `fds` until one of them is ready or `deadline` passes, retrying on EINTR: > 0 the
// number ready, 0 the deadline passed, -1 another error (errno says which).
int poll_until(pollfd* fds, nfds_t count, Clock::time_point deadline) noexcept;

}  // namespace stoker::detail
