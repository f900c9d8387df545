#include "loader/children/program_image.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mutex>

#include "base/posix_error.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

std::vector<std::string>& arguments() {
  static std::vector<std::string> args;
  return args;
}

bool g_initialised = false;

std::mutex& worker_mu() {
  static std::mutex mu;
  return mu;
}
std::string& worker_path() {  // guarded by worker_mu()
  static std::string path;
  return path;
}

}  // namespace

void record_program_arguments(int argc, char** argv) {
  arguments().assign(argv, argv + argc);
  if (arguments().empty()) arguments().push_back("stoker");
  g_initialised = true;
}

bool program_initialised() noexcept { return g_initialised; }

std::optional<ProgramImage> fork_server_image() {
  {
    std::lock_guard lock(worker_mu());
    if (!worker_path().empty()) return ProgramImage{worker_path(), {worker_path()}};
  }
  if (g_initialised) return ProgramImage{"/proc/self/exe", arguments()};
  return std::nullopt;
}

void set_worker_program(const std::string& path) {
  std::string absolute;
  if (!path.empty()) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      throw_errno(fmt::format("stoker: the worker executable {}", path), ErrorCode::invalid_option);
    }
    if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("stoker: the worker executable {} is not an executable file", path));
    }
    // Absolute, so that a later chdir of the trainer does not change which program starts.
    absolute = path;
    if (path.front() != '/') {
      char cwd[4096];
      if (!::getcwd(cwd, sizeof cwd)) throw_errno("getcwd", ErrorCode::io);
      absolute = fmt::format("{}/{}", cwd, path);
    }
  }
  std::lock_guard lock(worker_mu());
  worker_path() = std::move(absolute);
}

std::string worker_program() {
  std::lock_guard lock(worker_mu());
  return worker_path();
}

}  // namespace stoker::detail
