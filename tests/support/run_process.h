// Runs a program of this build and captures what it printed.
#pragma once

#include <cstdint>
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

// As run_program, with every file argv[0] writes limited to `max_file_bytes` (RLIMIT_FSIZE, soft
// and hard) and SIGXFSZ ignored: a write past the limit fails with EFBIG, as one onto a full disk
// fails with ENOSPC, without root.
RunResult run_program_with_file_limit(const std::vector<std::string>& argv, std::uint64_t max_file_bytes,
                                      unsigned timeout_s = 120);

// Runs `body` in a child process that has a mount namespace of its own with a tmpfs of
// `bytes` at `dir` (created): a disk that fills up with ENOSPC. Returns what `body` returns (the
// child's exit status), or 77 when this system lets the test mount none (neither root nor user
// namespaces).
int with_small_tmpfs(const std::string& dir, std::uint64_t bytes, const std::function<int()>& body);

}  // namespace stoker::test
