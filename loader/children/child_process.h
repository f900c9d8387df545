// One way to start a child process of the loader: a socket to it, the fork through Env (tests make
// it fail), and a child reaped on every way out. What the child does is the caller's: a function run
// in the fork, or an exec of a program image (ExecImage, made before the fork: between fork and exec
// a child calls only async-signal-safe functions, since the trainer may have other threads).
//
// A sacrificial child (the probe that first reads a dataset, the read of a batch too large for its
// slot) is tied to the thread that started it (PR_SET_PDEATHSIG: it ends with the trainer; one that
// finds itself orphaned before that exits ChildExit::orphaned), and killed and reaped when the
// ChildProcess is destroyed before it ended. A fork server lives longer than the thread that starts
// it: it is not tied (its lifeline ends it), and its owner takes over its pid and socket (release()).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace stoker::detail {

// A program image to exec in the child, with the child's end of the socket handed over by number
// in the environment variable `socket_env` (NAME=fd, NAME at most 100 characters; any NAME the
// parent has is replaced).
class ExecImage {
 public:
  ExecImage(std::string path, std::vector<std::string> args, std::string socket_env);
  ExecImage(const ExecImage&) = delete;  // argv points into args
  ExecImage& operator=(const ExecImage&) = delete;
  // In the child, with `sock` its end of the socket: makes `sock` the one descriptor the image
  // keeps, resets the signals and execs; returns only when the exec failed (errno says why).
  // Async-signal-safe.
  void exec(int sock) noexcept;
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  std::vector<std::string> args_;
  std::string socket_env_;
  std::vector<char*> argv_;
  std::vector<char*> envp_;  // the parent's environment, NAME= replaced at exec (see exec)
};

class ChildProcess {
 public:
  enum class Tie { to_this_thread, none };
  // Makes a socket pair (`socket_type`: SOCK_STREAM or SOCK_SEQPACKET) and forks. The child runs
  // `child_main(its end of the socket)`, which must not return (it ends with _exit); with
  // Tie::to_this_thread it first arms PR_SET_PDEATHSIG. Throws stoker::Error naming `what` ("the
  // probe that reads the dataset's metadata") when the socket or the fork fails.
  ChildProcess(const std::string& what, int socket_type, Tie tie, const std::function<void(int sock)>& child_main);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills (SIGKILL) and reaps a child not reaped yet.
  ~ChildProcess();

  pid_t pid() const noexcept { return pid_; }
  int socket() const noexcept { return sock_.get(); }
  // Waits for the child to end (EINTR retried) and returns its wait status; at once once reaped.
  int wait() noexcept;
  // SIGKILL, then wait(). Not through Env: a test that plays a worker SIGKILL cannot end means the
  // fork server's kill of a worker, never the end of a child of the loader's own.
  int kill_and_wait() noexcept;
  bool reaped() const noexcept { return reaped_; }
  int status() const noexcept { return status_; }
  // Hands the child's pid and this end of the socket to a caller that ends and reaps it itself.
  UniqueFd release(pid_t& pid) noexcept;

 private:
  pid_t pid_ = -1;
  UniqueFd sock_;
  bool reaped_ = false;
  int status_ = 0;
};

}  // namespace stoker::detail
