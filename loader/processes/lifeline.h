// Lifeline: how workers notice that the trainer process is gone, whatever killed it.
//
// A pipe whose write end only the trainer holds: when the trainer ends (even by SIGKILL) the kernel
// closes it, and the fork server and workers, which poll the read end, see POLLHUP and exit. Any
// other process holding the write end would keep them alive, so the write end is closed in every
// child a fork() makes — the fork server's, and a user's fork() without exec (a subprocess, a
// multiprocessing worker) — by a pthread_atfork child handler. The handler reads a lock-free table,
// closes what it lists and clears it; a fork() waits (the prepare handler) while a lifeline is
// between its pipe2() and its entry in the table. O_CLOEXEC covers exec.
#pragma once

#include "base/unique_fd.h"

namespace stoker::detail {

class Lifeline {
 public:
  // Throws stoker::Error when the pipe cannot be made, or when more than 64 are alive.
  Lifeline();
  ~Lifeline();
  Lifeline(const Lifeline&) = delete;
  Lifeline& operator=(const Lifeline&) = delete;

  // For the fork server and workers to poll.
  int read_end() const noexcept { return read_.get(); }

 private:
  UniqueFd read_;
  int write_ = -1;  // in the table while this Lifeline lives
  int slot_ = -1;
};

}  // namespace stoker::detail
