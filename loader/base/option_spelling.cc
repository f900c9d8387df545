#include "loader/base/option_spelling.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

namespace stoker {
namespace {

std::atomic<OptionSpelling> g_spelling{OptionSpelling::cpp};

}  // namespace

void set_option_spelling(OptionSpelling spelling) noexcept { g_spelling.store(spelling, std::memory_order_relaxed); }

namespace detail {

OptionSpelling option_spelling() noexcept { return g_spelling.load(std::memory_order_relaxed); }

std::string option_name(std::string_view option) {
  switch (option_spelling()) {
    case OptionSpelling::command_line: {
      std::string flag = fmt::format("--{}", option);
      std::replace(flag.begin(), flag.end(), '_', '-');
      return flag;
    }
    case OptionSpelling::python: return std::string(option);
    case OptionSpelling::cpp: break;
  }
  return fmt::format("Options::{}", option);
}

std::string option_setting(std::string_view option, std::string_view cpp, std::string_view text) {
  switch (option_spelling()) {
    case OptionSpelling::command_line: return fmt::format("{} {}", option_name(option), text);
    case OptionSpelling::python: return fmt::format("{}='{}'", option, text);
    case OptionSpelling::cpp: break;
  }
  return std::string(cpp);
}

std::string kept_batches() {
  switch (option_spelling()) {
    case OptionSpelling::python: return "batches whose tensors or arrays are alive";
    case OptionSpelling::command_line: return "batches the program keeps";  // the tools keep none
    case OptionSpelling::cpp: break;
  }
  return "live stoker::Batch objects";
}

std::string let_batches_go() {
  switch (option_spelling()) {
    case OptionSpelling::python:
      return "delete the batches you no longer need (every tensor or array of them), pass copy=True for tensors of "
             "their own, or raise held_batches to the number of batches you keep";
    case OptionSpelling::command_line: return "let go of the batches no longer needed";
    case OptionSpelling::cpp: break;
  }
  return "destroy or release() the batches you no longer need, copy what you want to keep (e.g. "
         "stoker::copy_to_tensors), or raise Options::held_batches to the number of batches you keep";
}

}  // namespace detail
}  // namespace stoker
