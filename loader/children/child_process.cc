#include "loader/children/child_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "base/env.h"
#include "base/posix_error.h"
#include "loader/children/child_exit.h"
#include "loader/children/child_hygiene.h"
#include "stoker/error.h"

extern char** environ;

namespace stoker::detail {

ExecImage::ExecImage(std::string path, std::vector<std::string> args, std::string socket_env)
    : path_(std::move(path)), args_(std::move(args)), socket_env_(std::move(socket_env)) {
  if (socket_env_.empty() || socket_env_.size() > 100) {
    throw Error(ErrorCode::internal, "stoker: the name of a child's socket variable must be 1 to 100 characters");
  }
  for (auto& a : args_) argv_.push_back(a.data());
  argv_.push_back(nullptr);
  const std::string prefix = socket_env_ + "=";
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, prefix.c_str(), prefix.size()) != 0) envp_.push_back(*e);
  }
  envp_.push_back(nullptr);  // the slot of NAME=fd, filled in exec()
  envp_.push_back(nullptr);
}

void ExecImage::exec(int sock) noexcept {
  // NAME=fd without allocating: the digits written into a buffer of the image's own.
  char text[128];
  const std::size_t n = socket_env_.size();  // at most 100: the constructor checked
  std::memcpy(text, socket_env_.data(), n);
  std::size_t at = n;
  text[at++] = '=';
  char digits[12];
  int d = 0;
  unsigned v = static_cast<unsigned>(sock);
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (d > 0) text[at++] = digits[--d];
  text[at] = '\0';
  envp_[envp_.size() - 2] = text;
  reset_signals();
  ::fcntl(sock, F_SETFD, 0);  // the one descriptor the new image keeps
  ::execve(path_.c_str(), argv_.data(), envp_.data());
}

ChildProcess::ChildProcess(const std::string& what, int socket_type, Tie tie,
                           const std::function<void(int sock)>& child_main) {
  int sv[2];
  if (::socketpair(AF_UNIX, socket_type | SOCK_CLOEXEC, 0, sv) != 0) throw_errno("socketpair for " + what);
  UniqueFd mine(sv[0]), theirs(sv[1]);
  const pid_t parent = ::getpid();
  const pid_t pid = Env::get().fork();
  if (pid < 0) throw_errno("fork of " + what);
  if (pid == 0) {
    if (tie == Tie::to_this_thread) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // it ends with the trainer
      if (::getppid() != parent) ::_exit(static_cast<int>(ChildExit::orphaned));
    }
    mine.reset();
    child_main(theirs.get());
    ::_exit(static_cast<int>(ChildExit::worker_threw));  // child_main returned: a bug
  }
  pid_ = pid;
  sock_ = std::move(mine);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      sock_(std::move(other.sock_)),
      reaped_(other.reaped_),
      status_(other.status_) {}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !reaped_) kill_and_wait();
}

int ChildProcess::wait() noexcept {
  if (pid_ <= 0 || reaped_) return status_;
  while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
  }
  reaped_ = true;
  return status_;
}

int ChildProcess::kill_and_wait() noexcept {
  if (pid_ > 0 && !reaped_) (void)::kill(pid_, SIGKILL);
  return wait();
}

UniqueFd ChildProcess::release(pid_t& pid) noexcept {
  pid = std::exchange(pid_, -1);
  return std::move(sock_);
}

}  // namespace stoker::detail
