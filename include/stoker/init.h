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
// Without init(), workers are forked from a copy of the training process made when a Loader is
// built: build Loaders before starting threads that use HDF5 (docs/faults.md).
#pragma once

#include "stoker/export.h"

namespace stoker {

// Call first in main(). Returns at once in the training process; never returns in a fork server.
STOKER_API void init(int argc, char** argv);

// Whether init() has been called in this process (workers then start from a clean image).
STOKER_API bool clean_workers() noexcept;

}  // namespace stoker
