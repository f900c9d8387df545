// stoker::init: the process's arguments for exec'd fork servers, or, in an exec'd fork server,
// the server's whole life (stoker/init.h).
#include "stoker/init.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "loader/fork_server.h"
#include "loader/worker_pool.h"

namespace stoker {
namespace {

std::vector<std::string>& arguments() {
  static std::vector<std::string> args;
  return args;
}

bool g_initialised = false;

}  // namespace

void init(int argc, char** argv) {
  if (const char* sock = std::getenv(detail::kForkServerEnv)) {
    const int fd = std::atoi(sock);
    ::unsetenv(detail::kForkServerEnv);  // not for anything this process starts
    detail::serve_exec_fork_server(fd);
  }
  arguments().assign(argv, argv + argc);
  if (arguments().empty()) arguments().push_back("stoker");
  g_initialised = true;
}

bool clean_workers() noexcept { return g_initialised; }

namespace detail {

std::vector<std::string> program_arguments() { return arguments(); }

}  // namespace detail
}  // namespace stoker
