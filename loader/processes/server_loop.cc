#include "loader/processes/server_loop.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>

#include "base/deadline.h"
#include "base/env.h"
#include "loader/children/child_hygiene.h"
#include "loader/processes/fork_protocol.h"

namespace stoker::detail {
namespace {

[[noreturn]] void exit_as(ChildExit e) { ::_exit(static_cast<int>(e)); }

class Server {
 public:
  Server(int sock, int lifeline, int sigfd, std::uint32_t n, const std::function<void(std::uint32_t)>& worker_main,
         const ForkHooks* hooks)
      : sock_(sock), lifeline_(lifeline), sigfd_(sigfd), worker_main_(worker_main), hooks_(hooks), workers_(n, -1) {}

  [[noreturn]] void run() {
    for (std::uint32_t w = 0; w < workers_.size(); ++w) {
      if (!spawn(w)) {
        kill_and_reap_all();  // the loader reports the failure it was sent
        exit_as(ChildExit::spawn_failed);
      }
    }
    for (;;) {
      pollfd fds[3] = {{sock_, POLLIN, 0}, {sigfd_, POLLIN, 0}, {lifeline_, POLLIN, 0}};
      if (poll_until(fds, 3, Clock::time_point::max()) < 0) terminate_all();
      if (fds[2].revents) terminate_all();  // the trainer is gone
      if (fds[1].revents) reap(true);
      if (fds[0].revents & POLLIN) {
        handle(receive());
      } else if (fds[0].revents & (POLLHUP | POLLERR)) {
        terminate_all();
      }
    }
  }

 private:
  // The loader's next message; ends everything when its end of the socket closed.
  Message receive() {
    Message m{};
    const ssize_t n = ::recv(sock_, &m, sizeof m, 0);
    if (n == 0) terminate_all();  // the loader closed its end without a shutdown
    if (n != static_cast<ssize_t>(sizeof m)) return Message{};
    return m;
  }

  void handle(const Message& m) {
    if (m.type == MsgType::shutdown) shutdown(std::chrono::milliseconds(m.arg));
    if (m.type == MsgType::spawn && m.worker < workers_.size() && workers_[m.worker] <= 0) {
      (void)spawn(m.worker);  // a replacement for a worker that died; a failure is reported
    }
    // Only the parent knows whether a pid is still its child's: an unreaped worker's pid (a zombie
    // at worst) cannot have been given to another process.
    if (m.type == MsgType::kill && m.worker < workers_.size() && m.pid > 0 && workers_[m.worker] == m.pid) {
      (void)Env::get().kill(m.pid, SIGKILL);
    }
  }

  // Forks worker w and reports it (spawned, or spawn_failed with the errno); false on failure.
  bool spawn(std::uint32_t w) {
    const pid_t server = ::getpid();
    if (hooks_ && hooks_->before) hooks_->before();
    const pid_t pid = Env::get().fork();
    const int fork_errno = errno;
    if (pid == 0) {
      if (hooks_ && hooks_->child) hooks_->child();
      run_worker_process(w, server);
    }
    if (hooks_ && hooks_->parent) hooks_->parent();
    errno = fork_errno;
    if (pid < 0) {
      send_msg(sock_, Message{MsgType::spawn_failed, w, 0, errno, 0});
      return false;
    }
    workers_[w] = pid;
    send_msg(sock_, Message{MsgType::spawned, w, pid, 0, 0});
    return true;
  }

  [[noreturn]] void run_worker_process(std::uint32_t w, pid_t server) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != server) exit_as(ChildExit::orphaned);  // the server died before PDEATHSIG was armed
    ::close(sock_);
    ::close(sigfd_);
    ::prctl(PR_SET_NAME, fmt::format("stoker-w{}", w).c_str());
    try {
      worker_main_(w);
    } catch (...) {
      exit_as(ChildExit::worker_threw);
    }
    ::_exit(0);
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
      const auto w = static_cast<std::uint32_t>(it - workers_.begin());
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

  // The loader has sent every worker its stop sentinel: waits up to `grace` for them, kills the rest.
  [[noreturn]] void shutdown(std::chrono::milliseconds grace) {
    const auto deadline = deadline_in(grace);
    reap(false);
    while (any_alive()) {
      pollfd fd{sigfd_, POLLIN, 0};
      if (poll_until(&fd, 1, deadline) <= 0) break;
      reap(false);
    }
    kill_and_reap_all();
    send_msg(sock_, Message{MsgType::shutdown_done, 0, 0, 0, 0});
    ::_exit(0);
  }

  int sock_, lifeline_, sigfd_;
  const std::function<void(std::uint32_t)>& worker_main_;
  const ForkHooks* hooks_;
  std::vector<pid_t> workers_;
};

}  // namespace

void serve(int sock, int lifeline, std::uint32_t num_workers, const std::function<void(std::uint32_t)>& worker_main,
           std::vector<int> keep, const ForkHooks* hooks, bool close_descriptors) {
  reset_signals();
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);
  const int sigfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) exit_as(ChildExit::no_signalfd);
  keep.insert(keep.end(), {sock, lifeline, sigfd});
  if (close_descriptors) close_all_except(keep);
  ::prctl(PR_SET_NAME, "stoker-forksrv");
  Server server(sock, lifeline, sigfd, num_workers, worker_main, hooks);
  server.run();
}

}  // namespace stoker::detail
