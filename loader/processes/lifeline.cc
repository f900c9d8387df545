#include "loader/processes/lifeline.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "base/posix_error.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

constexpr int kMaxLifelines = 64;
std::atomic<int> g_write_ends[kMaxLifelines];  // -1 or a live lifeline's write end; zero-initialised

// Held from a lifeline's pipe2() until its write end is in the table, and by fork() (its prepare
// handler) until the fork is done: a fork() in another thread never copies a write end that the
// child handler would not know to close.
pthread_mutex_t g_creating = PTHREAD_MUTEX_INITIALIZER;

void before_fork() noexcept { ::pthread_mutex_lock(&g_creating); }
void after_fork_in_parent() noexcept { ::pthread_mutex_unlock(&g_creating); }

void close_in_child() noexcept {
  // In the child of a fork(): it must not keep any trainer's workers alive. close() is
  // async-signal-safe. The forking thread holds g_creating (before_fork), and is the child's only
  // thread: it releases it.
  for (auto& slot : g_write_ends) {
    const int fd = slot.exchange(-1, std::memory_order_relaxed);
    if (fd >= 0) ::close(fd);
  }
  ::pthread_mutex_unlock(&g_creating);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto& slot : g_write_ends) slot.store(-1, std::memory_order_relaxed);
    if (int rc = ::pthread_atfork(before_fork, after_fork_in_parent, close_in_child); rc != 0) {
      throw_errno(rc, "pthread_atfork");
    }
  });
}

struct CreatingGuard {
  CreatingGuard() noexcept { ::pthread_mutex_lock(&g_creating); }
  ~CreatingGuard() { ::pthread_mutex_unlock(&g_creating); }
  CreatingGuard(const CreatingGuard&) = delete;
  CreatingGuard& operator=(const CreatingGuard&) = delete;
};

}  // namespace

Lifeline::Lifeline() {
  install_handler();
  const CreatingGuard no_fork_meanwhile;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe for the worker lifeline");
  read_ = UniqueFd(fds[0]);
  write_ = fds[1];
  for (int s = 0; s < kMaxLifelines; ++s) {
    int expected = -1;
    if (g_write_ends[s].compare_exchange_strong(expected, write_)) {
      slot_ = s;
      return;
    }
  }
  ::close(write_);
  throw Error(ErrorCode::invalid_option, "stoker: more than 64 loaders with workers in one process");
}

Lifeline::~Lifeline() {
  // In a fork() child the write end was closed already (close_in_child) and its number may have
  // been reused since: it is closed only while the table still holds it.
  // Under the same lock as its creation: a fork() between clearing the entry and the close would
  // copy a write end that no child handler closes.
  const CreatingGuard no_fork_meanwhile;
  int fd = write_;
  if (g_write_ends[slot_].compare_exchange_strong(fd, -1)) ::close(write_);
}

}  // namespace stoker::detail
