// The fork server's life, in the process forked (or exec'd) for it: a single-threaded loop that
// forks the workers, reaps them and reports each exit, forks replacements when the loader asks,
// and ends (killing and reaping its workers) when told to stop or when the trainer is gone.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "stoker/transform.h"

namespace stoker::detail {

// Resets signals (loader/children/child_hygiene.h), closes every descriptor but `sock`, `lifeline`
// and `keep` (unless `close_descriptors` is false: a transform host closed them before it imported
// the user's modules, whose own it keeps), forks `num_workers` workers, each running worker_main(w) and exiting 0 when
// it returns, and serves the loader on `sock` (loader/processes/fork_protocol.h). `hooks` (a transform host's
// interpreter's) are called around each fork of a worker. Never returns.
[[noreturn]] void serve(int sock, int lifeline, std::uint32_t num_workers,
                        const std::function<void(std::uint32_t)>& worker_main, std::vector<int> keep,
                        const ForkHooks* hooks = nullptr, bool close_descriptors = true);

}  // namespace stoker::detail
