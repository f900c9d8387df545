// Which program a fork server is started from (stoker/init.h): this program again, with the
// arguments init() saw, or the worker executable named by set_worker_executable(); or none, and
// fork servers are forked from the training process.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace stoker::detail {

// Records argv; from then on workers start from a fresh exec of the program. Called once, by
// init() at the start of main(), before any Loader exists.
void record_program_arguments(int argc, char** argv);
// Whether init() has run in this process.
bool program_initialised() noexcept;

// The program to exec and its arguments (argv[0] first).
struct ProgramImage {
  std::string path;  // "/proc/self/exe" for this program
  std::vector<std::string> argv;
};
// The image a fork server starts from now, or nullopt for a plain fork. Thread-safe.
std::optional<ProgramImage> fork_server_image();

// Sets (or, with "", clears) the worker executable; checks it is an executable file.
void set_worker_program(const std::string& path);
std::string worker_program();

}  // namespace stoker::detail
