// stoker::init: records the process's arguments for exec'd fork servers, or, in an exec'd fork
// server, is the server's whole life (stoker/init.h).
#include "stoker/init.h"

#include <fcntl.h>

#include <cstdlib>

#include "loader/child_reads/probe.h"
#include "loader/children/program_image.h"
#include "loader/processes/exec_server.h"
#include "loader/processes/fork_protocol.h"
#include "stoker/error.h"
#include "stoker/transform.h"

namespace stoker {

void init(int argc, char** argv) {
  if (const char* sock = std::getenv(detail::kProbeEnv)) {
    const int fd = std::atoi(sock);
    ::unsetenv(detail::kProbeEnv);
    detail::serve_probe(fd);
  }
  if (const char* sock = std::getenv(detail::kForkServerEnv)) {
    const int fd = std::atoi(sock);
    ::unsetenv(detail::kForkServerEnv);  // not for anything this process starts
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    detail::serve_exec_fork_server(fd);
  }
  detail::record_program_arguments(argc, argv);
}

void set_worker_executable(const std::string& path) { detail::set_worker_program(path); }

std::string worker_executable() { return detail::worker_program(); }

void serve_transform_host(const TransformFactory& factory, const ForkHooks& hooks, const TransformAnswer& answer) {
  const char* sock = std::getenv(detail::kForkServerEnv);
  if (!sock) {
    throw Error(ErrorCode::invalid_option,
                "stoker: serve_transform_host: this process was not started as a Loader's fork server "
                "(Options::transform.host names the program that calls it)");
  }
  const int fd = std::atoi(sock);
  ::unsetenv(detail::kForkServerEnv);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // not for what the user's code starts
  detail::serve_exec_fork_server(fd, &factory, &hooks, &answer);
}

bool clean_workers() noexcept {
  try {
    return detail::program_initialised() || !detail::worker_program().empty();
  } catch (...) {  // a std::string copy that cannot allocate
    return detail::program_initialised();
  }
}

}  // namespace stoker
