// Runs a program of this build and captures what it printed.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace stoker::test {

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out, err;
};

// Runs argv[0] with arguments, stdin from /dev/null, waiting at most `timeout_s` (then SIGKILL).
RunResult run_program(const std::vector<std::string>& argv, unsigned timeout_s = 120);

// As run_program, with argv[0] in a process group of its own (its pid is the group's), and
// `during(pid)` run on another thread while it runs (to signal the group, say); joined before
// returning.
RunResult run_program_in_group(const std::vector<std::string>& argv, const std::function<void(int pid)>& during,
                               unsigned timeout_s = 120);

// Starts argv[0] in the background, output discarded; returns its pid.
int start_program(const std::vector<std::string>& argv);

}  // namespace stoker::test
