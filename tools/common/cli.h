// Command-line conventions shared by stoker's tools: plain validator messages, usage errors exit 2
// (runtime errors exit 1), sizes and rates in binary units (KiB, MiB, GiB: 1 MiB = 2^20 bytes).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "stoker/option_values.h"

namespace stoker::tools {

// A whole number in [min, max]: "must be at least 1", "must be a whole number from 0 to 1024".
CLI::Validator whole_number(std::uint64_t min, std::uint64_t max = UINT64_MAX);

// whole_number(min, max), or the word "auto": "must be a whole number from 0 to 1024, or auto".
CLI::Validator whole_number_or_auto(std::uint64_t min, std::uint64_t max);

// A number (decimals allowed) of at least `min`.
CLI::Validator number_at_least(double min);

// A device name that stoker::Device::parse accepts (cpu, cuda, cuda:N, emulated).
CLI::Validator device_name();

// A pipeline (stoker/pipeline.h) whose syntax, operations and arguments are valid.
CLI::Validator pipeline_text();

// The flag of an option enum (stoker/option_values.h): one of its values' names, a command line
// writing '-' for '_' as it likes ("--order quasi-random"); --help lists them and shows the default.
template <class Enum>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, Enum& value, const std::string& help) {
  std::string names;
  for (std::string_view n : option_names<Enum>()) names += (names.empty() ? "" : ", ") + std::string(n);
  CLI::Validator one_of(
      [names](std::string& text) {
        return parse_option<Enum>(text) ? std::string() : "'" + text + "' is not one of " + names;
      },
      "{" + names + "}");
  return app
      .add_option_function<std::string>(
          flag, [&value](const std::string& text) { value = *parse_option<Enum>(text); }, help)
      ->check(one_of)
      ->default_str(std::string(stoker::name(value)));
}

// Parses; on a usage error prints "TOOL: message" and the --help hint and returns 2, for --help
// prints the help and returns 0; returns -1 when the program should go on.
int parse_or_exit(CLI::App& app, int argc, char** argv);

// A tool's main(): body(argc, argv), and an exception that escapes it printed as "TOOL: what"
// with exit status 1.
int run_tool(const char* name, int (*body)(int, char**), int argc, char** argv) noexcept;

// Bytes in binary units: "512.0 MiB", "1.50 GiB".
std::string binary_size(double bytes);
// Bytes per second in binary units: "812.3 MiB/s".
std::string binary_rate(double bytes_per_second);

}  // namespace stoker::tools
