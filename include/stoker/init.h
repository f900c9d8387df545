// stoker/init.h: workers that start from a clean process image.
//
//   int main(int argc, char** argv) {
//     stoker::init(argc, argv);   // first thing, like MPI_Init
//     ...
//   }
//
// With init(), each Loader's fork server is a fresh exec of this program (/proc/self/exe) that
// receives the batch ring's memory and the loader's settings over a socket, and forks the workers
// from there. Workers then inherit nothing of the training process: not its threads, nor a lock
// another thread held at that moment (HDF5's, CUDA's, OpenMP's, the allocator's), nor half-done
// state. Loaders may be built at any time, from any thread, next to threads that use HDF5.
//
// In that exec'd process init() does not return: it serves the workers and exits with them. The
// program's static initialisers run there too (as they do for any exec), so pipeline operations
// registered with STOKER_REGISTER_OP are known to the workers; code that runs before main must not
// mind running again (no files written, no servers started before main).
//
// A program that cannot call init() first (an interpreter that embeds stoker, a plugin) names a
// worker executable instead: a small program whose main() begins with init(), such as the
// installed `stoker-worker`. Each Loader's fork server is then an exec of that program, with the
// same clean start; only the pipeline operations linked into it are known to the workers.
//
// Without either, workers are forked from a copy of the training process made when a Loader is
// built: build Loaders before starting threads that use HDF5 (docs/faults.md).
#pragma once

#include <string>

#include "stoker/export.h"

namespace stoker {

// Call first in main(). Returns at once in the training process; never returns in a fork server.
STOKER_API void init(int argc, char** argv);

// From now on, Loaders built in this process start their fork server by exec of `path` (absolute,
// or relative to the working directory; it must be executable) instead of this program. An empty
// path returns to the default. Loaders already built keep the program they started with.
// Thread-safe. Throws stoker::Error (ErrorCode::invalid_option) for a path that is no executable.
STOKER_API void set_worker_executable(const std::string& path);
// The program set_worker_executable() named, or "".
STOKER_API std::string worker_executable();

// Whether workers start from a clean image: init() has been called in this process, or a worker
// executable is set.
STOKER_API bool clean_workers() noexcept;

}  // namespace stoker
