#include "loader/workers/setup_channel.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "loader/base/posix_error.h"
#include "loader/workers/fork_protocol.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

constexpr std::size_t kTextPiece = 64 << 10;
constexpr std::size_t kFdsPiece = 250;                           // below SCM_MAX_FD (253)
constexpr std::uint64_t kMaxSetupText = std::uint64_t{1} << 30;  // no setup stoker writes is near this
constexpr std::uint64_t kMaxSetupFds = 1 << 16;

struct SetupHeader {
  char magic[8];  // "STKSETUP"
  std::uint64_t text_bytes;
  std::uint64_t fds;
};
constexpr char kMagic[8] = {'S', 'T', 'K', 'S', 'E', 'T', 'U', 'P'};

void send_packet(int sock, const void* data, std::size_t bytes, const int* fds, std::size_t nfds) {
  iovec iov{const_cast<void*>(data), bytes};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (nfds) {
    control.resize(CMSG_SPACE(sizeof(int) * nfds));
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  while ((n = ::sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(bytes)) throw_errno("sending the worker setup to the fork server");
}

// One packet of at most `capacity` bytes, and the descriptors it carried.
std::size_t receive_packet(int sock, void* data, std::size_t capacity, std::vector<UniqueFd>& fds) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kFdsPiece)];
  iovec iov{data, capacity};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  while ((n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (n < 0) throw_errno("receiving the worker setup");
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.emplace_back(fd);
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    throw Error(ErrorCode::internal, "stoker: a packet of the worker setup was truncated");
  }
  if (n == 0) throw Error(ErrorCode::internal, "stoker: the loader closed its socket before the setup was complete");
  return static_cast<std::size_t>(n);
}

}  // namespace

void send_setup(int sock, const std::string& text, const std::vector<int>& fds) {
  SetupHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.text_bytes = text.size();
  h.fds = fds.size();
  send_packet(sock, &h, sizeof h, nullptr, 0);
  for (std::size_t at = 0; at < text.size(); at += kTextPiece) {
    send_packet(sock, text.data() + at, std::min(kTextPiece, text.size() - at), nullptr, 0);
  }
  const char one = 0;
  for (std::size_t at = 0; at < fds.size(); at += kFdsPiece) {
    send_packet(sock, &one, 1, fds.data() + at, std::min(kFdsPiece, fds.size() - at));
  }
}

ReceivedSetup receive_setup(int sock) {
  ReceivedSetup out;
  SetupHeader h{};
  if (receive_packet(sock, &h, sizeof h, out.fds) != sizeof h || std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 ||
      h.text_bytes > kMaxSetupText || h.fds > kMaxSetupFds || !out.fds.empty()) {
    throw Error(ErrorCode::internal, "stoker: the worker setup does not start with its header");
  }
  out.text.resize(static_cast<std::size_t>(h.text_bytes));
  for (std::size_t at = 0; at < out.text.size();) {
    at += receive_packet(sock, out.text.data() + at, std::min(kTextPiece, out.text.size() - at), out.fds);
  }
  while (out.fds.size() < h.fds) {
    char one;
    receive_packet(sock, &one, 1, out.fds);
  }
  if (out.fds.size() != h.fds) {
    throw Error(ErrorCode::internal,
                fmt::format("stoker: the worker setup came with {} descriptors, not {}", out.fds.size(), h.fds));
  }
  return out;
}

void fail_setup(int sock, int code, const std::string& why) noexcept {
  send_msg(sock, Message{MsgType::setup_failed, kServer, 0, code, 0});
  (void)::send(sock, why.data(), std::min<std::size_t>(why.size(), 64 << 10), MSG_NOSIGNAL);
  ::_exit(static_cast<int>(ChildExit::setup_failed));
}

}  // namespace stoker::detail
