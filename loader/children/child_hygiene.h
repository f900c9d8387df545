// What a fork server and its workers do first, so that they inherit nothing of the training
// process they were forked or exec'd from that would change what they do: signal handlers, a
// blocked mask, descriptors.
#pragma once

#include <optional>
#include <vector>

namespace stoker::detail {

// Every signal handler back to the default action and the mask emptied, while a disposition the
// trainer ignores stays ignored (nohup's SIGHUP); then SIGINT, SIGTERM, SIGHUP and SIGPIPE are
// ignored: a terminal's Ctrl-C or a scheduler's SIGTERM to the process group is the trainer's to
// act on, and the fork server and workers end when the trainer does (the lifeline), never before it
// decided. SIGKILL still ends any of them.
// Async-signal-safe: a child between fork and exec calls it.
void reset_signals() noexcept;

// Closes every descriptor from 3 up except those in `keep`, so that no descriptor of the trainer's
// stays open in a worker (close_range, or one by one up to the limit on kernels before 5.9).
void close_all_except(std::vector<int> keep) noexcept;

// Sets this process's oom_score_adj (/proc/self/oom_score_adj) to `value`; false when the kernel
// refused. Async-signal-safe: a child between fork and exec calls it.
bool set_oom_score_adj(int value) noexcept;

// Sets process `pid`'s oom_score_adj (a process of this user: raising it needs no privilege); false
// when the kernel refused. Not async-signal-safe.
bool set_oom_score_adj_of(int pid, int value) noexcept;

// The oom_score_adj of process `pid` ("self" when 0), or nullopt when it cannot be read.
std::optional<int> oom_score_adj_of(int pid);

}  // namespace stoker::detail
