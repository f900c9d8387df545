// The exit statuses of stoker's child processes (a fork server, a worker, a child that reads for the
// loader), and a wait status said in words. Every module that starts or is such a child names its
// exit from here, so that the parent reads one table.
#pragma once

#include <string>

namespace stoker::detail {

// The exit statuses of a fork server or a worker that cannot go on. Each is reported to the loader
// before, where there is a way to (a message); the status itself says which case it was when there
// is not.
enum class ChildExit : int {
  orphaned = 74,      // a worker whose fork server died before it could arm PR_SET_PDEATHSIG
  worker_threw = 70,  // a worker's loop threw (a bug: workers report errors in their slots)
  no_signalfd = 71,   // the fork server could not make the signalfd it reaps workers with
  spawn_failed = 72,  // the fork server could not fork a worker (spawn_failed was sent)
  setup_failed = 73,  // an exec'd fork server could not use its setup (setup_failed was sent)
  ring_refused = 75,  // a worker found a shared-memory ring its layout does not describe (it said why on stderr)
  exec_failed = 127,  // the exec of the fork server failed (spawn_failed was sent)
};

// "was killed by signal SIGKILL", "exited with status 3", "exited with status 73 (the fork
// server could not use its setup)".
std::string describe_wait_status(int wait_status);

}  // namespace stoker::detail
