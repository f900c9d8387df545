#include "loader/processes/fork_protocol.h"

#include <sys/socket.h>

#include <cerrno>

namespace stoker::detail {

bool send_msg(int sock, const Message& m) noexcept {
  for (;;) {
    const ssize_t n = ::send(sock, &m, sizeof m, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof m)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

}  // namespace stoker::detail
