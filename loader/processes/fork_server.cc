#include "loader/processes/fork_server.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "base/deadline.h"
#include "base/posix_error.h"
#include "loader/children/child_hygiene.h"
#include "loader/children/child_process.h"
#include "loader/processes/server_loop.h"
#include "loader/processes/setup_channel.h"
#include "loader/processes/started_host.h"
#include "stoker/error.h"

namespace stoker::detail {
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

bool peer_hung_up(int sock) {
  pollfd p{sock, POLLOUT, 0};
  while (::poll(&p, 1, 0) < 0 && errno == EINTR) {
  }
  return (p.revents & (POLLHUP | POLLERR)) != 0;
}

}  // namespace

ForkServer::ForkServer(std::uint32_t num_workers, const std::function<void(std::uint32_t)>& worker_main,
                       std::vector<int> keep_fds, int lifeline, const ExecStart* exec, int oom_score_adj) {
  launch(num_workers, worker_main, std::move(keep_fds), lifeline, exec, oom_score_adj);
  if (exec) {
    try {
      send_setup(sock_.get(), exec->setup, exec->fds);
    } catch (...) {
      // A program that exits before reading its setup (one whose main() does not call stoker::init)
      // closes the socket under us: what it left there (an exec failure) or its exit says more than
      // EPIPE, so read that as when it exits later. Any other failure is ours to report.
      if (!peer_hung_up(sock_.get())) {
        shutdown(std::chrono::milliseconds(0));
        throw;
      }
    }
  }
  worker_pids_.assign(num_workers, -1);
  worker_pidfds_.resize(num_workers);
  await_workers(num_workers, exec);
}

LaunchedServer launch_exec_server(const std::string& program, const std::vector<std::string>& args, int oom_score_adj) {
  ExecImage image(program, args, kForkServerEnv);
  ChildProcess child("the stoker fork server", SOCK_SEQPACKET, ChildProcess::Tie::none, [&](int sock) {
    // Checked by the loader, which reads it back (a kernel that refuses is a warning there).
    if (oom_score_adj > 0) (void)set_oom_score_adj(oom_score_adj);
    image.exec(sock);
    send_msg(sock, Message{MsgType::spawn_failed, kServer, 0, errno, 0});
    ::_exit(static_cast<int>(ChildExit::exec_failed));
  });
  LaunchedServer out;
  out.sock = child.release(out.pid);
  return out;
}

void ForkServer::launch(std::uint32_t num_workers, const std::function<void(std::uint32_t)>& worker_main,
                        std::vector<int> keep_fds, int lifeline, const ExecStart* exec, int oom_score_adj) {
  if (exec) {
    LaunchedServer server = exec->started ? StartedHostAccess::take(*exec->started) : LaunchedServer{};
    if (server.pid > 0) {
      if (oom_score_adj > 0) (void)set_oom_score_adj_of(server.pid, oom_score_adj);  // read back by the loader
    } else {
      server = launch_exec_server(exec->program, exec->argv, oom_score_adj);
    }
    pid_ = launched_pid_ = server.pid;
    sock_ = std::move(server.sock);
    return;
  }
  ChildProcess child("the stoker fork server", SOCK_SEQPACKET, ChildProcess::Tie::none, [&](int sock) {
    if (oom_score_adj > 0) (void)set_oom_score_adj(oom_score_adj);
    serve(sock, lifeline, num_workers, worker_main, std::move(keep_fds));
  });
  sock_ = child.release(pid_);
  launched_pid_ = pid_;
}

void ForkServer::give_up(int code, const std::string& why) {
  if (pid_ > 0) {
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
  shut_down_ = true;
  throw Error(error_code_from_wire(static_cast<std::uint64_t>(code)), why);
}

void ForkServer::await_workers(std::uint32_t num_workers, const ExecStart* exec) {
  // A server started by exec is a program whose main() must begin with stoker::init(): one that
  // does not never answers, or exits on its own. Say so rather than wait forever.
  std::string exec_hint;
  if (exec && !exec->role.empty()) {
    exec_hint = "; it is " + exec->role;
  } else if (exec && exec->program == "/proc/self/exe") {
    exec_hint =
        "; it is this program started again, so main() must call stoker::init(argc, argv) before anything else "
        "(stoker/init.h)";
  } else if (exec) {
    exec_hint = fmt::format(
        "; it is the worker executable {}, whose main() must call stoker::init(argc, argv) first "
        "(stoker/init.h; the installed stoker-worker does)",
        exec->program);
  }
  const auto deadline = deadline_in(std::chrono::seconds(60));
  for (std::uint32_t started = 0; started < num_workers;) {
    std::optional<Message> m;
    try {
      m = next_message(deadline, " while starting workers");
    } catch (const Error& e) {
      give_up(static_cast<int>(e.code()), e.what() + exec_hint);
    }
    if (!m) {
      ::kill(pid_, SIGKILL);
      give_up(static_cast<int>(ErrorCode::worker_stuck),
              fmt::format("stoker: the fork server (pid {}) did not start its workers within 60 s{}", launched_pid_,
                          exec_hint));
    }
    if (m->type == MsgType::setup_failed) {
      give_up(m->status, "stoker: the fork server could not start its workers: " + failure_text(sock_.get()));
    }
    if (m->type == MsgType::spawn_failed) {
      give_up(static_cast<int>(ErrorCode::io),
              m->worker == kServer ? fmt::format("stoker: could not start the fork server: exec of {}: {}",
                                                 exec ? exec->program : "?", std::strerror(m->status))
                                   : spawn_failure(m->worker, m->status));
    }
    if (m->type == MsgType::spawned && m->worker < num_workers) {
      this->started(m->worker, m->pid);
      ++started;
    }
  }
}

std::optional<Message> ForkServer::next_message(std::chrono::steady_clock::time_point deadline,
                                                const std::string& doing) {
  for (;;) {
    pollfd fd{sock_.get(), POLLIN, 0};
    if (poll_until(&fd, 1, deadline) == 0) return std::nullopt;
    Message m{};
    // Not recv_packet: a server that ended with our packet unread is given up on at once, as one
    // whose socket closed (its exit status says how it ended); its last messages would report
    // workers it can no longer replace.
    const ssize_t n = ::recv(sock_.get(), &m, sizeof m, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == static_cast<ssize_t>(sizeof m)) return m;
    throw Error(ErrorCode::worker_died,
                fmt::format("stoker: the fork server (pid {}) {}{}", launched_pid_, reap_gone_server(), doing));
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

void ForkServer::started(std::uint32_t w, pid_t pid) {
  worker_pids_.at(w) = pid;
  worker_pidfds_.at(w) = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (worker_pidfds_[w] || errno == ESRCH || errno == ENOSYS) return;
  // ESRCH: it ended, and was reaped, already (its exit report follows); ENOSYS: a kernel before
  // Linux 5.3, where a worker the fork server left is not watched (docs/faults.md). Else (EMFILE):
  // said, not ignored.
  throw Error(ErrorCode::io,
              fmt::format("stoker: pidfd_open of worker {} (pid {}): {}{}", w, pid, std::strerror(errno),
                          errno == EMFILE ? " (each worker needs a few descriptors in this process: raise the limit, "
                                            "ulimit -n, or use fewer workers)"
                                          : ""));
}

void ForkServer::kill_worker(std::uint32_t worker, pid_t pid) noexcept {
  if (sock_) (void)send_msg(sock_.get(), Message{MsgType::kill, worker, pid, 0, 0});
}

pid_t ForkServer::respawn(std::uint32_t worker) {
  send_msg(sock_.get(), Message{MsgType::spawn, worker, 0, 0, 0});
  const auto deadline = deadline_in(std::chrono::seconds(30));
  const std::string doing = fmt::format(" while replacing worker {}", worker);
  for (;;) {
    const std::optional<Message> m = next_message(deadline, doing);
    if (!m) {
      throw Error(ErrorCode::worker_died,
                  fmt::format("stoker: the fork server did not start a replacement for worker {} within 30 s", worker));
    }
    if (m->type == MsgType::exited) {
      exits_.push_back(WorkerExit{m->worker, m->pid, m->status});  // another death: reported next
    } else if (m->type == MsgType::spawn_failed && m->worker == worker) {
      throw Error(ErrorCode::io, spawn_failure(worker, m->status));
    } else if (m->type == MsgType::spawned && m->worker == worker) {
      started(worker, m->pid);
      return m->pid;
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
    const std::optional<Message> m = next_message(Clock::now(), "; its workers are gone");
    if (!m) return std::nullopt;
    if (m->type == MsgType::exited) return WorkerExit{m->worker, m->pid, m->status};
  }
}

void ForkServer::disown() noexcept {
  shut_down_ = true;
  pid_ = -1;
  sock_.reset();
}

void ForkServer::shutdown(std::chrono::milliseconds grace) noexcept {
  if (shut_down_ || pid_ <= 0) return;
  shut_down_ = true;
  send_msg(sock_.get(), Message{MsgType::shutdown, 0, 0, 0, grace.count()});
  // Wait for the server's answer or its end, bounded: it kills stragglers after `grace`.
  const auto deadline = deadline_in(grace + std::chrono::seconds(3));
  for (;;) {
    pollfd fd{sock_.get(), POLLIN, 0};
    if (poll_until(&fd, 1, deadline) <= 0) {
      ::kill(pid_, SIGKILL);  // workers follow by PR_SET_PDEATHSIG
      break;
    }
    Message m{};
    const ssize_t n = ::recv(sock_.get(), &m, sizeof m, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0 || m.type == MsgType::shutdown_done) break;
  }
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  sock_.reset();
}

}  // namespace stoker::detail
