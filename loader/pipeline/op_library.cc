#include "loader/pipeline/op_library.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "loader/pipeline/ops/registry.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

std::mutex loaded_mu;
std::set<std::string>& loaded() {
  static std::set<std::string> paths;  // resolved: a library named by two paths is one library
  return paths;
}

// Libraries loaded whose registrations failed, and why: loaded once, they say so every time.
std::map<std::string, std::string>& failed() {
  static std::map<std::string, std::string> why;
  return why;
}

std::string resolved(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) ? std::string(buf) : path;  // dlopen says why it cannot open it
}

}  // namespace

void load_op_libraries(const std::vector<std::string>& paths) {
  const std::lock_guard lock(loaded_mu);
  for (const std::string& path : paths) {
    if (loaded().count(resolved(path))) continue;
    if (const auto it = failed().find(resolved(path)); it != failed().end()) {
      throw Error(ErrorCode::invalid_option, fmt::format("stoker: op_libraries: {}: {}", printable(path), it->second));
    }
    const auto bad = [&](const std::string& why) {
      return Error(ErrorCode::invalid_option, fmt::format("stoker: op_libraries: {}: {}", printable(path), why));
    };
    if (path.find('/') == std::string::npos) {
      // dlopen would search the library path for a bare name: a file in the working directory is
      // what the user meant.
      throw bad("name it by a path (\"./" + printable(path) + "\"), not a bare file name");
    }
    const std::size_t before = user_op_count();
    std::vector<std::string> errors;
    collect_registration_errors(&errors);
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    collect_registration_errors(nullptr);
    if (!handle) {
      const char* why = ::dlerror();
      throw bad(fmt::format("cannot be loaded: {}", why ? why : "dlopen failed"));
    }
    if (!errors.empty()) {
      failed()[resolved(path)] = fmt::format("{}", fmt::join(errors, "; "));  // said again by a later Loader
      throw bad(failed()[resolved(path)]);
    }
    if (user_op_count() == before) {
      throw bad("registers no pipeline operation: none with STOKER_REGISTER_OP, or the process had loaded it before");
    }
    loaded().insert(resolved(path));  // the handle is never closed: its operations stay registered
  }
}

}  // namespace stoker::detail
