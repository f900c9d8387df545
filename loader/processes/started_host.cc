#include "loader/processes/started_host.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>

#include "base/deadline.h"
#include "base/posix_error.h"
#include "loader/processes/fork_protocol.h"
#include "loader/processes/setup_channel.h"
#include "stoker/error.h"

namespace stoker {
namespace {

constexpr const char* kGone = "stoker: the transform's host was discarded or taken by a Loader";

// Whether the other end of `sock` closed it (the process exited).
bool hung_up(int sock) noexcept {
  pollfd p{sock, POLLIN, 0};
  while (::poll(&p, 1, 0) < 0 && errno == EINTR) {
  }
  if (p.revents & (POLLHUP | POLLERR)) return true;
  char c;
  return (p.revents & POLLIN) && ::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace

StartedHost::StartedHost(int pid, int sock) noexcept : pid_(pid), sock_(sock), owner_(::getpid()) {}

std::shared_ptr<StartedHost> StartedHost::start(const std::vector<std::string>& argv) {
  if (argv.empty()) throw Error(ErrorCode::invalid_option, "stoker: StartedHost::start: no program to start");
  detail::LaunchedServer server = detail::launch_exec_server(argv.front(), argv);
  return std::shared_ptr<StartedHost>(new StartedHost(server.pid, server.sock.release()));
}

StartedHost::~StartedHost() { discard(); }

void StartedHost::ask(const std::string& question, std::chrono::milliseconds timeout) {
  if (pid_.load() <= 0) throw Error(ErrorCode::transform, kGone);
  // A question larger than the socket's buffer is taken as the host reads it: not past `timeout`.
  const auto ms = std::max<std::int64_t>(timeout.count(), 1);
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>(ms % 1000 * 1000)};
  if (::setsockopt(sock_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) != 0) {
    detail::throw_errno("setsockopt SO_SNDTIMEO for the transform's host");
  }
  try {
    detail::send_question(sock_, question);
  } catch (const Error&) {
    if (hung_up(sock_)) ended();  // how it ended says more than EPIPE
    const int pid = pid_.load();
    discard();
    throw Error(ErrorCode::transform,
                fmt::format("stoker: the transform's host (pid {}) did not take its question within {} ms", pid,
                            timeout.count()));
  }
  unanswered_ = true;
}

std::optional<std::string> StartedHost::answer(std::chrono::milliseconds wait) {
  if (pid_.load() <= 0) throw Error(ErrorCode::transform, kGone);
  pollfd p{sock_, POLLIN, 0};
  const int r = detail::poll_until(&p, 1, detail::deadline_in(wait));
  if (r < 0) detail::throw_errno("poll for the transform host's answer");
  if (r == 0) return std::nullopt;
  std::optional<std::string> text;
  try {
    text = detail::receive_answer(sock_);
  } catch (const Error&) {
    ended();  // it ended inside its answer, or sent one that breaks the protocol
  }
  if (!text) ended();  // a message (its exec failed, or it could not answer) or its socket closed
  unanswered_ = false;
  return text;
}

void StartedHost::ended() {
  const int pid = pid_.load();
  const std::string who = fmt::format("stoker: the transform's host (pid {})", pid);
  // What it said before it ended: an exec that failed, or an answer function that threw.
  detail::Message m{};
  std::string why;
  ErrorCode code = ErrorCode::transform;
  if (detail::recv_packet(sock_, &m, sizeof m, MSG_DONTWAIT) == static_cast<ssize_t>(sizeof m)) {
    if (m.type == detail::MsgType::spawn_failed) {
      why = fmt::format("{} could not be started: exec: {}", who, std::strerror(m.status));
    } else if (m.type == detail::MsgType::setup_failed) {
      why = detail::failure_text(sock_);
      code = error_code_from_wire(static_cast<std::uint64_t>(m.status));
    }
  }
  // One that said nothing and still holds its socket broke the protocol: it is killed at once.
  // Else it is exiting: up to 5 s for it to end, then SIGKILL.
  int st = 0;
  pid_t got = 0;
  if (why.empty() && !hung_up(sock_)) {
    why = fmt::format("{} sent what is no answer to a transform host's question", who);
    code = ErrorCode::internal;
  } else {
    for (int i = 0; i < 5000 && (got = ::waitpid(pid, &st, WNOHANG)) == 0; ++i) ::usleep(1000);
  }
  if (got == 0) {
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  pid_.store(-1);
  ::close(std::exchange(sock_, -1));
  if (why.empty()) why = fmt::format("{} {}", who, detail::describe_wait_status(st));
  throw Error(code, why);
}

void StartedHost::discard() noexcept {
  const int pid = pid_.exchange(-1);
  if (sock_ >= 0) ::close(std::exchange(sock_, -1));
  if (pid <= 0 || ::getpid() != owner_) return;  // a fork's copy: the host is its parent's
  ::kill(pid, SIGKILL);                          // it has no workers yet: nothing else to end
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

namespace detail {

LaunchedServer StartedHostAccess::take(StartedHost& host) noexcept {
  if (host.unanswered_ || ::getpid() != host.owner_) {
    host.discard();  // a half-read exchange cannot become a fork server's socket
    return {};
  }
  const int pid = host.pid_.exchange(-1);  // one taker
  if (pid <= 0) return {};
  return LaunchedServer{pid, UniqueFd(std::exchange(host.sock_, -1))};
}

}  // namespace detail
}  // namespace stoker
