#include "loader/processes/setup_channel.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>

#include "base/posix_error.h"
#include "loader/processes/fork_protocol.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

constexpr std::size_t kTextPiece = 64 << 10;
constexpr std::size_t kFdsPiece = 250;                           // below SCM_MAX_FD (253)
constexpr std::uint64_t kMaxSetupText = std::uint64_t{1} << 30;  // no setup stoker writes is near this
constexpr std::uint64_t kMaxSetupFds = 1 << 16;
constexpr std::size_t kFailureText = 64 << 10;  // the most of fail_setup's text that is sent

struct SetupHeader {
  char magic[8];  // kSetup, kQuestion or kAnswer
  std::uint64_t text_bytes;
  std::uint64_t fds;
};
constexpr char kSetup[8] = {'S', 'T', 'K', 'S', 'E', 'T', 'U', 'P'};
constexpr char kQuestion[8] = {'S', 'T', 'K', 'Q', 'U', 'E', 'S', 'T'};
constexpr char kAnswer[8] = {'S', 'T', 'K', 'A', 'N', 'S', 'W', 'R'};

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

// A header, the text in pieces, then the descriptors in pieces.
void send_text(int sock, const char (&magic)[8], const std::string& text, const std::vector<int>& fds) {
  SetupHeader h{};
  std::memcpy(h.magic, magic, sizeof h.magic);
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

// What follows header `h` (already received and checked).
ReceivedSetup receive_body(int sock, const SetupHeader& h) {
  ReceivedSetup out;
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

bool is(const SetupHeader& h, const char (&magic)[8]) { return std::memcmp(h.magic, magic, sizeof h.magic) == 0; }

}  // namespace

void send_setup(int sock, const std::string& text, const std::vector<int>& fds) { send_text(sock, kSetup, text, fds); }

void send_question(int sock, const std::string& text) { send_text(sock, kQuestion, text, {}); }

ReceivedSetup receive_setup(int sock, const std::function<std::string(const std::string&)>& answer) {
  for (;;) {
    SetupHeader h{};
    std::vector<UniqueFd> none;
    if (receive_packet(sock, &h, sizeof h, none) != sizeof h || !(is(h, kSetup) || is(h, kQuestion)) ||
        h.text_bytes > kMaxSetupText || h.fds > kMaxSetupFds || !none.empty() || (is(h, kQuestion) && h.fds != 0)) {
      throw Error(ErrorCode::internal, "stoker: the worker setup does not start with its header");
    }
    if (is(h, kSetup)) return receive_body(sock, h);
    if (!answer) {
      throw Error(ErrorCode::invalid_option,
                  "stoker: this fork server was asked a question before its setup, and it answers none (a transform "
                  "host answers what serve_transform_host's answer function does)");
    }
    send_text(sock, kAnswer, answer(receive_body(sock, h).text), {});
  }
}

std::optional<std::string> receive_answer(int sock) {
  SetupHeader h{};
  const ssize_t n = ::recv(sock, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
  if (n != static_cast<ssize_t>(sizeof h) || !is(h, kAnswer)) return std::nullopt;
  std::vector<UniqueFd> none;
  receive_packet(sock, &h, sizeof h, none);
  if (h.text_bytes > kMaxSetupText || h.fds != 0) {
    throw Error(ErrorCode::internal, "stoker: a transform host's answer does not start with its header");
  }
  return receive_body(sock, h).text;
}

std::string failure_text(int sock) {
  std::string why(kFailureText, '\0');
  const ssize_t got = recv_packet(sock, why.data(), why.size(), 0);
  why.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  return why;
}

void fail_setup(int sock, int code, const std::string& why) noexcept {
  send_msg(sock, Message{MsgType::setup_failed, kServer, 0, code, 0});
  (void)::send(sock, why.data(), std::min(why.size(), kFailureText), MSG_NOSIGNAL);
  ::_exit(static_cast<int>(ChildExit::setup_failed));
}

}  // namespace stoker::detail
