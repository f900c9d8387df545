#include "tools/common/cli.h"

#include <fmt/format.h>

#include <charconv>
#include <iostream>

#include "stoker/device.h"
#include "stoker/error.h"
#include "stoker/pipeline.h"

namespace stoker::tools {

CLI::Validator whole_number(std::uint64_t min, std::uint64_t max) {
  std::string range = max == UINT64_MAX ? fmt::format("at least {}", min) : fmt::format("from {} to {}", min, max);
  // Checked on the text, before CLI11 converts it: "-1" must not wrap around to 2^64 - 1.
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        std::uint64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
          return fmt::format("must be a whole number {}, not '{}'", range, text);
        }
        if (v < min || v > max) return fmt::format("must be {}, not {}", range, text);
        return {};
      },
      max == UINT64_MAX ? fmt::format("INT>={}", min) : fmt::format("INT in [{},{}]", min, max));
}

CLI::Validator whole_number_or_auto(std::uint64_t min, std::uint64_t max) {
  CLI::Validator number = whole_number(min, max);
  return CLI::Validator(
      [number, min, max](std::string& text) -> std::string {
        if (text == "auto") return {};
        std::string copy = text;
        if (number(copy).empty()) return {};
        return fmt::format("must be a whole number from {} to {}, or auto, not '{}'", min, max, text);
      },
      fmt::format("INT in [{},{}] or auto", min, max));
}

CLI::Validator number_at_least(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        double v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
          return fmt::format("must be a number of at least {}, not '{}'", min, text);
        }
        if (v < min) return fmt::format("must be at least {}, not {}", min, text);
        return {};
      },
      fmt::format("NUMBER>={}", min));
}

CLI::Validator pipeline_text() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          check_pipeline(text);
        } catch (const Error& e) {
          return e.what();
        }
        return {};
      },
      "FIELD=OPS[;...]");
}

CLI::Validator device_name() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          (void)Device::parse(text);
        } catch (const Error&) {
          return fmt::format("must be cpu, cuda, cuda:N or emulated, not '{}'", text);
        }
        return {};
      },
      "DEVICE");
}

int parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << app.get_name() << ": " << e.what() << "\n"
              << "Run '" << app.get_name() << " --help' for the options.\n";
    return 2;
  }
  return -1;
}

int run_tool(const char* name, int (*body)(int, char**), int argc, char** argv) noexcept {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << std::endl;
  } catch (...) {
    std::cerr << name << ": an unknown exception" << std::endl;
  }
  return 1;
}

std::string binary_size(double bytes) {
  if (bytes >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024));
  if (bytes >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024));
  if (bytes >= 1024.0) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{:.0f} B", bytes);
}

std::string binary_rate(double bytes_per_second) { return binary_size(bytes_per_second) + "/s"; }

}  // namespace stoker::tools
