#include "loader/children/child_hygiene.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>

namespace stoker::detail {
namespace {

// Closes [lo, hi]. close_range needs Linux 5.9; before that (ENOSYS) every descriptor up to the
// limit is closed one by one.
void close_fds(unsigned lo, unsigned hi) noexcept {
  if (::close_range(lo, hi, 0) == 0) return;
  rlimit limit{};
  unsigned max = 65536;
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    max = static_cast<unsigned>(std::min<rlim_t>(limit.rlim_cur, 1u << 20));
  }
  for (unsigned fd = lo; fd <= hi && fd < max; ++fd) ::close(static_cast<int>(fd));
}

}  // namespace

void reset_signals() noexcept {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction now {};
    if (::sigaction(sig, nullptr, &now) != 0 || now.sa_handler == SIG_IGN) continue;
    ::signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_IGN);
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

bool set_oom_score_adj(int value) noexcept {
  // The decimal text by hand: snprintf is not async-signal-safe.
  char text[8];
  int n = 0;
  char digits[8];
  int d = 0;
  unsigned v = value < 0 ? static_cast<unsigned>(-value) : static_cast<unsigned>(value);
  do {
    digits[d++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v > 0 && d < 7);
  if (value < 0) text[n++] = '-';
  while (d > 0) text[n++] = digits[--d];
  const int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text, static_cast<std::size_t>(n)) == n;
  ::close(fd);
  return ok;
}

bool set_oom_score_adj_of(int pid, int value) noexcept {
  char path[48], text[16];
  std::snprintf(path, sizeof path, "/proc/%d/oom_score_adj", pid);
  const int n = std::snprintf(text, sizeof text, "%d", value);
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text, static_cast<std::size_t>(n)) == n;
  ::close(fd);
  return ok;
}

std::optional<int> oom_score_adj_of(int pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/oom_score_adj")
                            : "/proc/" + std::to_string(pid) + "/oom_score_adj");
  int value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

}  // namespace stoker::detail
