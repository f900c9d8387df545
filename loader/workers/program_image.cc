#include "loader/workers/program_image.h"

namespace stoker::detail {
namespace {

std::vector<std::string>& arguments() {
  static std::vector<std::string> args;
  return args;
}

bool g_initialised = false;

}  // namespace

void record_program_arguments(int argc, char** argv) {
  arguments().assign(argv, argv + argc);
  if (arguments().empty()) arguments().push_back("stoker");
  g_initialised = true;
}

const std::vector<std::string>& program_arguments() noexcept { return arguments(); }

bool program_initialised() noexcept { return g_initialised; }

}  // namespace stoker::detail
