#include "loader/processes/fork_protocol.h"

#include <sys/socket.h>

#include <cerrno>
#include <utility>

namespace stoker::detail {

bool send_msg(int sock, const Message& m) noexcept {
  for (;;) {
    const ssize_t n = ::send(sock, &m, sizeof m, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof m)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

ssize_t recv_packet(int sock, void* buf, std::size_t size, int flags) noexcept {
  bool reset = false;  // reported once: the next call returns what is queued, or 0 (the end)
  for (;;) {
    const ssize_t n = ::recv(sock, buf, size, flags);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == ECONNRESET && !std::exchange(reset, true)) continue;
    return n;
  }
}

}  // namespace stoker::detail
