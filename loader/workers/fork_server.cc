#include "loader/workers/fork_server.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <set>

#include "loader/base/env.h"
#include "loader/base/posix_error.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

// spawn_failed: fork() of worker `worker` failed with errno `status` (worker kServer: the exec of
// the fork server itself). setup_failed: the exec'd server could not use its setup; a packet with
// the reason follows.
enum class MsgType : std::uint32_t {
  spawned = 1,
  exited = 2,
  shutdown = 3,
  shutdown_done = 4,
  spawn = 5,
  spawn_failed = 6,
  setup_failed = 7
};
constexpr std::uint32_t kServer = 0xffffffffu;

struct Message {
  MsgType type;
  std::uint32_t worker;
  std::int32_t pid;
  std::int32_t status;
  std::int64_t arg;
};

using Clock = std::chrono::steady_clock;

bool send_msg(int sock, const Message& m) noexcept {
  for (;;) {
    ssize_t n = ::send(sock, &m, sizeof m, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof m)) return true;
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
}

// Resets every signal's disposition and the mask to what a fresh process has, then ignores SIGINT
// and SIGPIPE (the trainer decides what Ctrl-C does; pipe errors are handled as errors).
void reset_signals() noexcept {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
}

// Closes every descriptor from 3 up except those in `keep`.
// Closes [lo, hi]. close_range needs Linux 5.9; before that (ENOSYS) every descriptor up to the
// limit is closed one by one, so that no descriptor of the trainer's leaks into a worker.
void close_fds(unsigned lo, unsigned hi) noexcept {
  if (::close_range(lo, hi, 0) == 0) return;
  rlimit limit{};
  unsigned max = 65536;
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    max = static_cast<unsigned>(std::min<rlim_t>(limit.rlim_cur, 1u << 20));
  }
  for (unsigned fd = lo; fd <= hi && fd < max; ++fd) ::close(static_cast<int>(fd));
}

void close_all_except(std::vector<int> keep) noexcept {
  std::sort(keep.begin(), keep.end());
  unsigned lo = 3;
  for (int fd : keep) {
    if (fd < 0 || static_cast<unsigned>(fd) < lo) continue;
    if (static_cast<unsigned>(fd) > lo) close_fds(lo, static_cast<unsigned>(fd) - 1);
    lo = static_cast<unsigned>(fd) + 1;
  }
  close_fds(lo, ~0u);
}

class Server {
 public:
  Server(int sock, int lifeline, int sigfd, std::uint32_t n, const std::function<void(std::uint32_t)>& worker_main)
      : sock_(sock), lifeline_(lifeline), sigfd_(sigfd), worker_main_(worker_main), workers_(n, -1) {}

  [[noreturn]] void run() {
    for (std::uint32_t w = 0; w < workers_.size(); ++w) {
      if (!spawn(w)) {
        kill_and_reap_all();  // the loader reports the failure it was sent
        ::_exit(72);
      }
    }
    for (;;) {
      pollfd fds[3] = {{sock_, POLLIN, 0}, {sigfd_, POLLIN, 0}, {lifeline_, POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        terminate_all();
      }
      if (fds[2].revents) terminate_all();  // the trainer is gone
      if (fds[1].revents) reap(true);
      if (fds[0].revents & POLLIN) {
        Message m{};
        ssize_t n = ::recv(sock_, &m, sizeof m, 0);
        if (n == static_cast<ssize_t>(sizeof m) && m.type == MsgType::shutdown) {
          shutdown(std::chrono::milliseconds(m.arg));
        }
        if (n == static_cast<ssize_t>(sizeof m) && m.type == MsgType::spawn && m.worker < workers_.size() &&
            workers_[m.worker] <= 0) {
          (void)spawn(m.worker);  // a replacement for a worker that died; a failure is reported
        }
        if (n == 0) terminate_all();  // the loader closed its end without a shutdown
      } else if (fds[0].revents & (POLLHUP | POLLERR)) {
        terminate_all();
      }
    }
  }

 private:
  // Forks worker w and reports it (spawned, or spawn_failed with the errno); false on failure.
  bool spawn(std::uint32_t w) {
    const pid_t server = ::getpid();
    pid_t pid = Env::get().fork();
    if (pid == 0) {
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != server) ::_exit(1);  // the server died before PDEATHSIG was armed
      ::close(sock_);
      ::close(sigfd_);
      ::prctl(PR_SET_NAME, fmt::format("stoker-w{}", w).c_str());
      try {
        worker_main_(w);
      } catch (...) {
        ::_exit(70);
      }
      ::_exit(0);
    }
    if (pid < 0) {
      send_msg(sock_, Message{MsgType::spawn_failed, w, 0, errno, 0});
      return false;
    }
    workers_[w] = pid;
    send_msg(sock_, Message{MsgType::spawned, w, pid, 0, 0});
    return true;
  }

  bool any_alive() const {
    return std::any_of(workers_.begin(), workers_.end(), [](pid_t p) { return p > 0; });
  }

  // Reaps every exited worker; reports each exit when `report`.
  void reap(bool report) {
    signalfd_siginfo info;
    while (::read(sigfd_, &info, sizeof info) > 0) {
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      auto it = std::find(workers_.begin(), workers_.end(), pid);
      if (it == workers_.end()) continue;
      *it = -1;
      auto w = static_cast<std::uint32_t>(it - workers_.begin());
      if (report) send_msg(sock_, Message{MsgType::exited, w, pid, status, 0});
    }
  }

  void kill_and_reap_all() {
    for (pid_t p : workers_) {
      if (p > 0) ::kill(p, SIGKILL);
    }
    for (pid_t& p : workers_) {
      if (p <= 0) continue;
      while (::waitpid(p, nullptr, 0) < 0 && errno == EINTR) {
      }
      p = -1;
    }
  }

  [[noreturn]] void terminate_all() {
    kill_and_reap_all();
    ::_exit(0);
  }

  [[noreturn]] void shutdown(std::chrono::milliseconds grace) {
    auto deadline = Clock::now() + grace;
    reap(false);
    while (any_alive()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd fd{sigfd_, POLLIN, 0};
      ::poll(&fd, 1, static_cast<int>(left));
      reap(false);
    }
    kill_and_reap_all();
    send_msg(sock_, Message{MsgType::shutdown_done, 0, 0, 0, 0});
    ::_exit(0);
  }

  int sock_, lifeline_, sigfd_;
  const std::function<void(std::uint32_t)>& worker_main_;
  std::vector<pid_t> workers_;
};

}  // namespace

namespace {

// "stoker: could not start worker 1: fork: Resource temporarily unavailable (EAGAIN): ..."
std::string spawn_failure(std::uint32_t worker, int err) {
  std::string hint;
  if (err == EAGAIN) hint = ": the limit on processes (ulimit -u, or the container's pids limit) is reached";
  if (err == ENOMEM) hint = ": out of memory";
  const char* name = strerrorname_np(err);
  return fmt::format("stoker: could not start worker {}: fork: {} ({}){}; lower num_workers or raise the limit", worker,
                     std::strerror(err), name ? name : "?", hint);
}

}  // namespace

std::string describe_wait_status(int st) {
  if (WIFSIGNALED(st)) {
    return fmt::format("was killed by signal {}{}", signal_name(WTERMSIG(st)), WCOREDUMP(st) ? " (core dumped)" : "");
  }
  if (WIFEXITED(st)) return fmt::format("exited with status {}", WEXITSTATUS(st));
  return fmt::format("stopped (wait status {:#x})", st);
}

void serve(int sock, int lifeline, std::uint32_t num_workers, const std::function<void(std::uint32_t)>& worker_main,
           std::vector<int> keep) {
  reset_signals();
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) ::_exit(71);
  keep.insert(keep.end(), {sock, lifeline, sigfd});
  close_all_except(keep);
  ::prctl(PR_SET_NAME, "stoker-forksrv");
  Server server(sock, lifeline, sigfd, num_workers, worker_main);
  server.run();
}

ReceivedSetup receive_setup(int sock) {
  std::string text(1 << 20, '\0');
  iovec iov{text.data(), text.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 1024)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  while ((n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (n < 0) throw_errno("receiving the worker setup");
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
    throw Error(ErrorCode::internal, "stoker: the worker setup was truncated");
  ReceivedSetup out;
  text.resize(static_cast<std::size_t>(n));
  out.setup = std::move(text);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      out.fds.emplace_back(fd);
    }
  }
  return out;
}

void fail_setup(int sock, const std::string& why) noexcept {
  send_msg(sock, Message{MsgType::setup_failed, kServer, 0, 0, 0});
  (void)::send(sock, why.data(), why.size(), MSG_NOSIGNAL);
  ::_exit(73);
}

namespace {

void send_setup(int sock, const ExecStart& exec) {
  iovec iov{const_cast<char*>(exec.setup.data()), exec.setup.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * exec.fds.size()));
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * exec.fds.size());
  std::memcpy(CMSG_DATA(c), exec.fds.data(), sizeof(int) * exec.fds.size());
  ssize_t n;
  while ((n = ::sendmsg(sock, &msg, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(exec.setup.size())) throw_errno("sending the worker setup to the fork server");
}

}  // namespace

ForkServer::ForkServer(std::uint32_t num_workers, std::function<void(std::uint32_t)> worker_main,
                       std::vector<int> keep_fds, int lifeline, const ExecStart* exec) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) throw_errno("socketpair for the fork server");
  UniqueFd mine(sv[0]), theirs(sv[1]);
  // For exec: everything the child needs is made before fork, so that between fork and exec it
  // calls only async-signal-safe functions (the trainer may have other threads).
  std::vector<std::string> env_text;
  std::vector<char*> argv, envp;
  if (exec) {
    for (const auto& a : exec->argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    env_text.push_back(fmt::format("{}={}", kForkServerEnv, theirs.get()));
    for (char** e = environ; *e; ++e) {
      if (std::strncmp(*e, kForkServerEnv, std::strlen(kForkServerEnv)) != 0) envp.push_back(*e);
    }
    envp.push_back(env_text.back().data());
    envp.push_back(nullptr);
  }

  pid_ = ::fork();
  if (pid_ < 0) throw_errno("fork of the stoker fork server");
  launched_pid_ = pid_;
  if (pid_ == 0) {
    if (exec) {
      reset_signals();
      const int sock = theirs.get();
      ::fcntl(sock, F_SETFD, 0);  // the one descriptor the new image keeps
      ::execve("/proc/self/exe", argv.data(), envp.data());
      send_msg(sock, Message{MsgType::spawn_failed, kServer, 0, errno, 0});
      ::_exit(127);
    }
    serve(theirs.get(), lifeline, num_workers, worker_main, std::move(keep_fds));
  }
  theirs.reset();
  sock_ = std::move(mine);
  if (exec) {
    try {
      send_setup(sock_.get(), *exec);
    } catch (...) {
      shutdown(std::chrono::milliseconds(0));
      throw;
    }
  }
  worker_pids_.assign(num_workers, -1);
  // A server started by exec is this program run again: one whose main() does not begin with
  // stoker::init() never answers, or exits on its own. Say so rather than wait forever.
  const std::string exec_hint =
      exec ? "; it is this program started again, so main() must call stoker::init(argc, argv) before anything "
             "else (stoker/init.h)"
           : "";
  auto give_up = [&](ErrorCode code, const std::string& why) {
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    shut_down_ = true;
    throw Error(code, why);
  };
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (std::uint32_t started = 0; started < num_workers;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd fd{sock_.get(), POLLIN, 0};
    const int ready = left > 0 ? ::poll(&fd, 1, static_cast<int>(left)) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      ::kill(pid_, SIGKILL);
      give_up(ErrorCode::worker_stuck,
              fmt::format("stoker: the fork server (pid {}) did not start its workers within 60 s{}", launched_pid_,
                          exec_hint));
    }
    Message m{};
    ssize_t n = ::recv(sock_.get(), &m, sizeof m, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n != static_cast<ssize_t>(sizeof m)) {
      int st = 0;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
      shut_down_ = true;
      throw Error(ErrorCode::worker_died, fmt::format("stoker: the fork server {} while starting workers{}",
                                                      describe_wait_status(st), exec_hint));
    }
    if (m.type == MsgType::setup_failed) {
      std::string why(4096, '\0');
      const ssize_t got = ::recv(sock_.get(), why.data(), why.size(), 0);
      why.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
      give_up(ErrorCode::worker_died, "stoker: the fork server could not start its workers: " + why);
    }
    if (m.type == MsgType::spawn_failed) {
      give_up(ErrorCode::io, m.worker == kServer
                                 ? fmt::format("stoker: could not start the fork server: exec of /proc/self/exe: {}",
                                               std::strerror(m.status))
                                 : spawn_failure(m.worker, m.status));
    }
    if (m.type == MsgType::spawned) {
      worker_pids_.at(m.worker) = m.pid;
      ++started;
    }
  }
}

ForkServer::~ForkServer() { shutdown(std::chrono::milliseconds(2000)); }

std::string ForkServer::reap_gone_server() {
  // Its socket closed: it is exiting. Give it a moment to become reapable, to say how it ended.
  int st = 0;
  for (int i = 0; pid_ > 0 && i < 1000; ++i) {
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      shut_down_ = true;
      return describe_wait_status(st);
    }
    ::usleep(1000);
  }
  return "is gone";
}

pid_t ForkServer::respawn(std::uint32_t worker) {
  send_msg(sock_.get(), Message{MsgType::spawn, worker, 0, 0, 0});
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd fd{sock_.get(), POLLIN, 0};
    if (left <= 0 || ::poll(&fd, 1, static_cast<int>(std::max<long long>(left, 0))) == 0) {
      throw Error(ErrorCode::worker_died,
                  fmt::format("stoker: the fork server did not start a replacement for worker {} within 30 s", worker));
    }
    Message m{};
    ssize_t n = ::recv(sock_.get(), &m, sizeof m, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n != static_cast<ssize_t>(sizeof m)) {
      throw Error(ErrorCode::worker_died,
                  fmt::format("stoker: the fork server {} while replacing worker {}", reap_gone_server(), worker));
    }
    if (m.type == MsgType::exited) {
      exits_.push_back(WorkerExit{m.worker, m.pid, m.status});  // another death: reported next
    } else if (m.type == MsgType::spawn_failed && m.worker == worker) {
      throw Error(ErrorCode::io, spawn_failure(worker, m.status));
    } else if (m.type == MsgType::spawned && m.worker == worker) {
      worker_pids_.at(worker) = m.pid;
      return m.pid;
    }
  }
}

std::optional<WorkerExit> ForkServer::poll_exit() {
  if (!exits_.empty()) {
    WorkerExit e = exits_.front();
    exits_.pop_front();
    return e;
  }
  for (;;) {
    Message m{};
    ssize_t n = ::recv(sock_.get(), &m, sizeof m, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return std::nullopt;
    if (n == static_cast<ssize_t>(sizeof m)) {
      if (m.type == MsgType::exited) return WorkerExit{m.worker, m.pid, m.status};
      continue;
    }
    const std::string how = reap_gone_server();
    throw Error(ErrorCode::worker_died,
                fmt::format("stoker: the fork server (pid {}) {}; its workers are gone", launched_pid_, how));
  }
}

void ForkServer::shutdown(std::chrono::milliseconds grace) noexcept {
  if (shut_down_ || pid_ <= 0) return;
  shut_down_ = true;
  send_msg(sock_.get(), Message{MsgType::shutdown, 0, 0, 0, grace.count()});
  // Wait for the server's answer or its end, bounded: it kills stragglers after `grace`.
  auto deadline = Clock::now() + grace + std::chrono::seconds(3);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      ::kill(pid_, SIGKILL);  // workers follow by PR_SET_PDEATHSIG
      break;
    }
    pollfd fd{sock_.get(), POLLIN, 0};
    int r = ::poll(&fd, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    Message m{};
    ssize_t n = ::recv(sock_.get(), &m, sizeof m, MSG_DONTWAIT);
    if (n <= 0 || m.type == MsgType::shutdown_done) break;
  }
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  sock_.reset();
}

}  // namespace stoker::detail
