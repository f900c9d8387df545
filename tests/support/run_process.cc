#include "tests/support/run_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

namespace stoker::test {
namespace {

// For run_program_with_file_limit: the child's file-size limit (0: none). Set before fork.
std::uint64_t child_file_limit = 0;

[[noreturn]] void exec_child(const std::vector<std::string>& argv, int out, int err) {
  if (child_file_limit > 0) {
    const rlimit limit{static_cast<rlim_t>(child_file_limit), static_cast<rlim_t>(child_file_limit)};
    ::signal(SIGXFSZ, SIG_IGN);  // kept across exec: the write fails with EFBIG instead of killing
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) ::_exit(126);
  }
  int devnull = ::open("/dev/null", O_RDONLY);
  ::dup2(devnull, 0);
  ::dup2(out, 1);
  ::dup2(err, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execv(args[0], args.data());
  std::perror(args[0]);
  ::_exit(127);
}

}  // namespace

RunResult run_program(const std::vector<std::string>& argv, unsigned timeout_s) {
  return run_program_in_group(argv, nullptr, timeout_s);
}

RunResult run_program_in_group(const std::vector<std::string>& argv, const std::function<void(int pid)>& during,
                               unsigned timeout_s) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
  pid_t pid = ::fork();
  if (pid == 0) {
    if (during) ::setpgid(0, 0);
    exec_child(argv, out[1], err[1]);
  }
  if (during) ::setpgid(pid, pid);  // also here: no race with `during` signalling the group
  std::thread side;
  if (during) side = std::thread([&] { during(pid); });
  ::close(out[1]);
  ::close(err[1]);
  RunResult r;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      ::kill(pid, SIGKILL);
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      char buf[4096];
      ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  if (side.joinable()) side.join();
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  return r;
}

RunResult run_program_with_file_limit(const std::vector<std::string>& argv, std::uint64_t max_file_bytes,
                                      unsigned timeout_s) {
  child_file_limit = max_file_bytes;
  try {
    RunResult r = run_program(argv, timeout_s);
    child_file_limit = 0;
    return r;
  } catch (...) {
    child_file_limit = 0;
    throw;
  }
}

namespace {

bool write_text(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// A mount namespace of this (single-threaded, forked) process's own: as root, or as root of a new
// user namespace mapped to this user.
bool own_mount_namespace() {
  if (::unshare(CLONE_NEWNS) != 0) {
    const std::string uid = std::to_string(::getuid()), gid = std::to_string(::getgid());
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    if (!write_text("/proc/self/setgroups", "deny") || !write_text("/proc/self/uid_map", "0 " + uid + " 1") ||
        !write_text("/proc/self/gid_map", "0 " + gid + " 1"))
      return false;
  }
  return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

}  // namespace

int with_small_tmpfs(const std::string& dir, std::uint64_t bytes, const std::function<int()>& body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(120);
    if (!own_mount_namespace()) ::_exit(77);
    ::mkdir(dir.c_str(), 0755);
    const std::string size = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, size.c_str()) != 0) ::_exit(77);
    int rc = 1;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "with_small_tmpfs: %s\n", e.what());
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int st = 0;
  if (pid < 0 || ::waitpid(pid, &st, 0) != pid) return 1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int start_program(const std::vector<std::string>& argv) {
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    exec_child(argv, devnull, devnull);
  }
  return pid;
}

}  // namespace stoker::test
