// ForkServer: the loader's end of a small single-threaded process that forks the loader's workers.
//
// Forking a multi-threaded trainer is where fork goes wrong: a lock another thread holds at that
// moment stays held forever in the child. The Loader starts the fork server in its constructor,
// before it starts any thread of its own, and every worker (and, later, every respawn) is forked
// from that single-threaded process instead of the trainer (loader/processes/server_loop.h).
//
// Lifetimes: the server and its workers watch a "lifeline" pipe whose write end only the trainer
// holds; when the trainer process ends, for whatever reason, the pipe hangs up, the server kills
// and reaps its workers and exits, and workers exit by themselves at their next wait (or by
// PR_SET_PDEATHSIG when the server is gone). PR_SET_PDEATHSIG is not used between the trainer and
// the server because it follows the creating thread, not the process.
//
// The server reaps workers and reports each exit (pid, wait status) over a socket, so the consumer
// wakes at once when a worker dies. Not thread-safe: used by one thread at a time (its owner's host
// lock, loader/loader_impl.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "loader/processes/fork_protocol.h"
#include "stoker/transform.h"

namespace stoker::detail {

struct WorkerExit {
  std::uint32_t worker = 0;
  pid_t pid = 0;
  int wait_status = 0;  // as from waitpid
};

// A fork server process started by exec, not yet sent its setup: its pid and its socket.
struct LaunchedServer {
  pid_t pid = -1;
  UniqueFd sock;
};

// Forks and execs `program` with `argv` as a fork server (stoker::init), its socket's number in
// kForkServerEnv; a positive `oom_score_adj` is set in it first. An exec that fails is reported on
// the socket (spawn_failed, kServer) and the process exits with ChildExit::exec_failed. Throws
// stoker::Error when the socket or the fork cannot be made.
LaunchedServer launch_exec_server(const std::string& program, const std::vector<std::string>& argv,
                                  int oom_score_adj = 0);

// A fork server started by exec of this program (stoker::init): the setup text and descriptors it
// is sent over its socket (loader/processes/setup_channel.h), and the arguments it is started with.
struct ExecStart {
  std::string setup;
  std::vector<int> fds;
  std::string program;  // the path to exec: /proc/self/exe, or the worker executable
  std::vector<std::string> argv;
  // What the program is, for a message when it does not start its workers ("" for the worker
  // executable or this program, which the message then names).
  std::string role;
  // The program already started (Transform::started): taken and sent the setup in place of a new
  // start, when it was not taken before.
  std::shared_ptr<StartedHost> started;
};

class ForkServer {
 public:
  // Forks the server, which forks `num_workers` workers; worker w runs worker_main(w) and exits
  // with _exit(0) when it returns. `keep_fds` stay open in the server and the workers; `lifeline`
  // is the read end of the trainer's lifeline pipe. Returns once every worker has started (within
  // 60 s). With `exec`, the server is a fresh exec of this program instead (stoker::init), which
  // gets exec->setup and exec->fds and runs the workers from them; worker_main is not used. A
  // positive `oom_score_adj` is set in the server as it starts (its workers inherit it).
  ForkServer(std::uint32_t num_workers, const std::function<void(std::uint32_t)>& worker_main,
             std::vector<int> keep_fds, int lifeline, const ExecStart* exec = nullptr, int oom_score_adj = 0);
  ~ForkServer();
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  pid_t pid() const noexcept { return pid_; }
  const std::vector<pid_t>& worker_pids() const noexcept { return worker_pids_; }
  // A pidfd of worker `worker`'s process, taken as its start is reported (the server's child, unless
  // it ended and was reaped in the instant between: a pid is given again only after the kernel
  // went through the others), or -1 (a kernel before Linux 5.3, or it ended already). Readable once
  // the process ended, whoever reaps it: what watches workers the server left.
  int worker_pidfd(std::uint32_t worker) const noexcept {
    return worker < worker_pidfds_.size() ? worker_pidfds_[worker].get() : -1;
  }

  // Readable when an exit report is waiting or the server is gone; for poll().
  int report_fd() const noexcept { return sock_.get(); }
  // A pending exit report, without blocking. Throws stoker::Error when the server itself died.
  std::optional<WorkerExit> poll_exit();

  // Forks a replacement for worker `worker`, which has exited and been reported; returns its pid
  // once it runs. Exits reported meanwhile are kept for poll_exit(). Throws stoker::Error when the
  // server is gone or does not answer within 30 s.
  pid_t respawn(std::uint32_t worker);
  // Has the server SIGKILL worker `worker` if it is still process `pid`: the server is its parent,
  // which alone can tell (a pid killed from here could have been reaped and reused). Its exit is
  // reported as any other. Never throws: a server that is gone is reported by poll_exit().
  void kill_worker(std::uint32_t worker, pid_t pid) noexcept;

  // Asks the server to wait up to `grace` for workers to exit (the caller has told them to), kill
  // the rest, reap everything and exit; then reaps the server. Idempotent; never throws.
  void shutdown(std::chrono::milliseconds grace) noexcept;
  // In a process forked from the owner, which neither made nor may reap the server: closes this
  // copy of the socket, sends nothing, and from then on does nothing. Never throws.
  void disown() noexcept;

 private:
  // Forks (and for exec, execs) the server process.
  void launch(std::uint32_t num_workers, const std::function<void(std::uint32_t)>& worker_main,
              std::vector<int> keep_fds, int lifeline, const ExecStart* exec, int oom_score_adj);
  // Waits for the server's report of each worker started, or throws why not.
  void await_workers(std::uint32_t num_workers, const ExecStart* exec);
  // The server ended or must be given up: reaps it, marks it gone, and throws `code, why`.
  [[noreturn]] void give_up(int code, const std::string& why);
  // The server's next message within `deadline`; nullopt when the deadline passed. Throws
  // stoker::Error, saying how the server ended (then `context`), when its socket closed.
  std::optional<Message> next_message(std::chrono::steady_clock::time_point deadline, const std::string& context);
  // The server's socket ended: reaps it if it exited and says how ("was killed by signal ...").
  std::string reap_gone_server();

  pid_t pid_ = -1;
  pid_t launched_pid_ = -1;  // pid_ as it was, for messages after the server is reaped
  UniqueFd sock_;
  std::vector<pid_t> worker_pids_;
  std::vector<UniqueFd> worker_pidfds_;
  // Records worker `w`'s process `pid`, and takes its pidfd.
  void started(std::uint32_t w, pid_t pid);
  std::deque<WorkerExit> exits_;  // reported while waiting for a respawn
  bool shut_down_ = false;
};

}  // namespace stoker::detail
