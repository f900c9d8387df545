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
    case OptionSpelling::python:
      // The Python package takes PyTorch's name where the C++ API's is shorter.
      return option == "prefetch" ? std::string("prefetch_factor") : std::string(option);
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
  if (option_spelling() == OptionSpelling::python) return "batches whose tensors are alive";
  return "live stoker::Batch objects";
}

std::string let_batches_go() {
  if (option_spelling() == OptionSpelling::python) {
    return fmt::format(
        "delete the batches you no longer need (every tensor of them), pass copy=True for tensors of their own, or "
        "raise {} to the number of batches you keep",
        option_name("held_batches"));
  }
  return fmt::format(
      "destroy or release() the batches you no longer need, copy what you want to keep, or raise {} to the number of "
      "batches you keep",
      option_name("held_batches"));
}

}  // namespace detail
}  // namespace stoker
