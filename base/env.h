// Env: the OS calls that fail in production, behind one seam (LevelDB's Env, in small), so that
// tests can make each fail on demand and check what the user gets: reserving shared memory
// (posix_fallocate: ENOSPC), reading files (pread: EIO, short reads), starting worker processes
// (fork: EAGAIN) and ending them (kill: a process SIGKILL does not end at once); and the read-ahead
// hints (posix_fadvise, madvise WILLNEED), whose effect on the page cache a test could only see by
// timing, so that tests see the hints themselves. The default passes each call through.
//
// Not synchronised: install an Env before any Loader exists and keep it until the last one is
// gone. Worker processes are forked from the process that installed it and inherit it.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace stoker::detail {

class Env {
 public:
  virtual ~Env() = default;
  // posix_fallocate's contract: 0, or the error number (errno is not set).
  virtual int posix_fallocate(int fd, off_t offset, off_t len);
  virtual ssize_t pread(int fd, void* buf, std::size_t n, off_t offset);
  virtual pid_t fork();
  // posix_fadvise's contract: 0, or the error number.
  virtual int posix_fadvise(int fd, off_t offset, off_t len, int advice);
  virtual int madvise(void* addr, std::size_t len, int advice);
  // kill(2), as the fork server sends SIGKILL to a stuck worker: where a test plays a worker that
  // SIGKILL does not end (one in uninterruptible sleep, on a hung network file system).
  virtual int kill(pid_t pid, int sig);
  // A worker filled the slot at `slot` (`bytes` long) and is about to hand it back: where a test
  // plays a worker that went wrong. The default does nothing.
  virtual void filled_slot(std::byte* slot, std::size_t bytes) {
    (void)slot;
    (void)bytes;
  }

  // The installed Env, or the default.
  static Env& get() noexcept;
  // Installs `env` (nullptr: the default again) and returns the one it replaces.
  static Env* install(Env* env) noexcept;
};

}  // namespace stoker::detail
