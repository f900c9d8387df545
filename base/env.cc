#include "base/env.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

namespace stoker::detail {
namespace {

Env g_default;
Env* g_env = &g_default;

}  // namespace

int Env::posix_fallocate(int fd, off_t offset, off_t len) { return ::posix_fallocate(fd, offset, len); }

ssize_t Env::pread(int fd, void* buf, std::size_t n, off_t offset) { return ::pread(fd, buf, n, offset); }

pid_t Env::fork() { return ::fork(); }

int Env::posix_fadvise(int fd, off_t offset, off_t len, int advice) { return ::posix_fadvise(fd, offset, len, advice); }

int Env::madvise(void* addr, std::size_t len, int advice) { return ::madvise(addr, len, advice); }
int Env::kill(pid_t pid, int sig) { return ::kill(pid, sig); }

Env& Env::get() noexcept { return *g_env; }

Env* Env::install(Env* env) noexcept {
  Env* previous = g_env == &g_default ? nullptr : g_env;
  g_env = env ? env : &g_default;
  return previous;
}

}  // namespace stoker::detail
