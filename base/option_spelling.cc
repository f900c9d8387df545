#include "base/option_spelling.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

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
    case OptionSpelling::python: return std::string(option == "mix" ? "sources" : option);
    case OptionSpelling::cpp: break;
  }
  return fmt::format("Options::{}", option);
}

std::string option_entry(std::string_view option, std::size_t k) {
  if (option_spelling() == OptionSpelling::command_line) return fmt::format("{} number {}", option_name(option), k + 1);
  return fmt::format("{}[{}]", option_name(option), k);
}

std::string option_setting(std::string_view option, std::string_view cpp, std::string_view text) {
  switch (option_spelling()) {
    case OptionSpelling::command_line: return fmt::format("{} {}", option_name(option), text);
    case OptionSpelling::python: return fmt::format("{}='{}'", option, text);
    case OptionSpelling::cpp: break;
  }
  return std::string(cpp);
}

std::string option_set_to(std::string_view option, std::string_view value) {
  return option_setting(option, fmt::format("Options::{} = \"{}\"", option, value), value);
}

std::string option_set_to(std::string_view option, std::span<const std::string> values) {
  switch (option_spelling()) {
    case OptionSpelling::command_line: return fmt::format("{} {}", option_name(option), fmt::join(values, ","));
    case OptionSpelling::python: return fmt::format("{}=['{}']", option, fmt::join(values, "', '"));
    case OptionSpelling::cpp: break;
  }
  return fmt::format("Options::{} = {{\"{}\"}}", option, fmt::join(values, "\", \""));
}

}  // namespace detail
}  // namespace stoker
