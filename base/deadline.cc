#include "base/deadline.h"

#include <algorithm>
#include <cerrno>
#include <limits>

namespace stoker::detail {

Clock::time_point deadline_in(std::chrono::milliseconds timeout) noexcept {
  return timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
}

int poll_until(pollfd* fds, nfds_t count, Clock::time_point deadline) noexcept {
  for (;;) {
    int timeout_ms = -1;
    if (deadline != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, std::numeric_limits<int>::max()));
    }
    const int r = ::poll(fds, count, timeout_ms);
    if (r >= 0 || errno != EINTR) return r;
  }
}

}  // namespace stoker::detail
