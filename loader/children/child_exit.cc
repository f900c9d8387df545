#include "loader/children/child_exit.h"

#include <fmt/format.h>
#include <sys/wait.h>

#include "base/posix_error.h"

namespace stoker::detail {
namespace {

const char* meaning(int status) {
  switch (static_cast<ChildExit>(status)) {
    case ChildExit::orphaned: return "its fork server was gone before it started";
    case ChildExit::worker_threw: return "a worker's loop threw: a bug in stoker, please report it";
    case ChildExit::no_signalfd: return "the fork server could not make a signalfd";
    case ChildExit::spawn_failed: return "the fork server could not fork a worker";
    case ChildExit::setup_failed: return "the fork server could not use its setup";
    case ChildExit::ring_refused: return "the worker refused the loader's shared memory: see its message on stderr";
    case ChildExit::exec_failed: return "the program could not be started again as a fork server";
  }
  return nullptr;
}

}  // namespace

std::string describe_wait_status(int st) {
  if (WIFSIGNALED(st)) {
    return fmt::format("was killed by signal {}{}", signal_name(WTERMSIG(st)), WCOREDUMP(st) ? " (core dumped)" : "");
  }
  if (WIFEXITED(st)) {
    const char* why = meaning(WEXITSTATUS(st));
    return why ? fmt::format("exited with status {} ({})", WEXITSTATUS(st), why)
               : fmt::format("exited with status {}", WEXITSTATUS(st));
  }
  return fmt::format("stopped (wait status {:#x})", st);
}

}  // namespace stoker::detail
