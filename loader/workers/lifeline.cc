#include "loader/workers/lifeline.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "loader/base/posix_error.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

constexpr int kMaxLifelines = 64;
std::atomic<int> g_write_ends[kMaxLifelines];  // -1 or a live lifeline's write end; zero-initialised

void close_in_child() noexcept {
  // In the child of a fork(): it must not keep any trainer's workers alive. close() is
  // async-signal-safe; the table is not locked (another thread may have been changing it).
  for (auto& slot : g_write_ends) {
    const int fd = slot.exchange(-1, std::memory_order_relaxed);
    if (fd >= 0) ::close(fd);
  }
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto& slot : g_write_ends) slot.store(-1, std::memory_order_relaxed);
    if (int rc = ::pthread_atfork(nullptr, nullptr, close_in_child); rc != 0) throw_errno(rc, "pthread_atfork");
  });
}

}  // namespace

Lifeline::Lifeline() {
  install_handler();
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
  int fd = write_;
  if (g_write_ends[slot_].compare_exchange_strong(fd, -1)) ::close(write_);
}

}  // namespace stoker::detail
