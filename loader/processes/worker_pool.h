// WorkerPool: the worker processes and the consumer's end of their rings.
//
// Starts the fork server (loader/processes/fork_server.h), which forks the workers; hands slots to workers
// (task ring + eventfd); collects the slots they finished (done rings); waits for any of: a
// finished slot, a worker's exit report, an interrupt, a timeout; stops them all. It knows
// nothing of epochs or batch order (loader/producers/task_table.h does). Consumer thread only, except
// interrupt().
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"
#include "loader/processes/fork_server.h"
#include "loader/processes/lifeline.h"
#include "loader/shm/slot_pool.h"
#include "loader/worker/dataset_spec.h"

namespace stoker::detail {

class WorkerPool {
 public:
  // Forks `num_workers` workers over `slots`, each opening `dataset`. Must run before the process
  // starts threads of stoker's own (the fork server is forked from the calling process).
  // A positive `oom_score_adj` is given to the fork server and the workers (child_hygiene.h).
  WorkerPool(std::shared_ptr<SlotPool> slots, std::uint32_t num_workers, std::shared_ptr<const DatasetSpec> dataset,
             int oom_score_adj = 0);
  ~WorkerPool();  // stop()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  std::uint32_t size() const noexcept { return num_workers_; }
  pid_t server_pid() const noexcept { return server_ ? server_->pid() : -1; }
  pid_t pid(std::uint32_t worker) const noexcept { return server_->worker_pids()[worker]; }
  std::vector<int> pids() const;

  // Gives `slot` (its header and indices written) to `worker`.
  void assign(std::uint32_t worker, std::uint32_t slot);

  // Calls on_done(worker, slot) for every slot the workers said they finished since the last call.
  // The slot number is the worker's word: the caller checks it (loader/producers/slot_check.h).
  template <class F>
  void collect(F&& on_done) {
    for (std::uint32_t w = 0; w < num_workers_; ++w) {
      WorkerChannel ch = slots_->view().channel(w);
      std::uint32_t s;
      while (ch.done.pop(s)) on_done(w, s);
    }
  }

  // The slot the next wait() is for: a worker that finishes it wakes the consumer, and one that
  // finishes another does not. Call before the last collect() that precedes the wait: a slot
  // finished after it wakes the wait, one finished before it is collected (SegmentView::awaited_slot).
  // nullopt: waiting for none (after the slot arrived).
  void await_slot(std::optional<std::uint32_t> slot) noexcept;

  enum class Wake { activity, timeout, interrupted };
  // Blocks until a worker finished the awaited slot or exited (activity), `timeout` passed (a
  // negative one never does), or interrupt() was called.
  Wake wait(std::chrono::milliseconds timeout);
  // Times a wait() was woken by a finished slot (Stats::consumer_wakes).
  std::uint64_t wakes() const noexcept { return wakes_; }
  // Makes a wait() in another thread return `interrupted` (any thread; for shutdown).
  void interrupt() noexcept;
  // SIGKILLs worker w (by its parent, the fork server: never a reused pid); its exit is reported.
  void kill(std::uint32_t w) noexcept;

  // A worker's exit, reported by the fork server, without blocking. Throws stoker::Error when the
  // fork server itself is gone. Looks at the server's socket when a wait() saw it readable (or a
  // respawn kept reports back) since it last found none, else at most every kExitLook: not a
  // system call per batch, and a death is noticed within that even while batches are ready.
  std::optional<WorkerExit> poll_exit();
  static constexpr std::chrono::milliseconds kExitLook{50};

  // Replaces worker `worker`, which has exited (and whose finished slots were collected): its task
  // ring is emptied, a new process forked, and `slots` (its unfinished tasks, in order) given to it
  // again. Returns the new pid.
  pid_t respawn(std::uint32_t worker, const std::vector<std::uint32_t>& slots);

  // Whether a fork server that died can be replaced: when it was started by exec (stoker::init),
  // a new one inherits nothing of this process's threads. A forked one would be forked from this
  // multi-threaded process, so it is not replaced.
  bool can_restart_server() const noexcept { return exec_.has_value(); }
  // After the fork server died: waits (up to 10 s, then SIGKILL and 1 s more) until its workers,
  // which PR_SET_PDEATHSIG kills, are gone, so that none still writes into a slot. Returns the pids
  // of those still there (asleep in the kernel: their slots must not be reused). Never throws.
  std::vector<pid_t> bury_workers() noexcept;
  // Whether worker `w`'s current process has ended (its pidfd is readable), whether or not its exit
  // was reported; false where that cannot be known (no pidfd).
  bool has_ended(std::uint32_t w) const noexcept;
  // Starts a new fork server and workers, with empty task rings. Throws stoker::Error.
  void restart_server();

  // CPU time of every worker so far.
  double cpu_seconds() const;
  // Worker w's progress counter (WorkerChannel::progress).
  std::uint64_t progress(std::uint32_t w) const noexcept {
    return slots_->view().channel(w).progress->load(std::memory_order_relaxed);
  }
  // The sample worker w was running a pipeline or transform on (WorkerChannel::sample), if any:
  // read once it died, this is the sample it died on.
  std::optional<std::uint64_t> working_on(std::uint32_t w) const noexcept {
    const std::uint64_t v = slots_->view().channel(w).sample->load(std::memory_order_relaxed);
    return v == 0 ? std::nullopt : std::optional<std::uint64_t>(v - 1);
  }
  // Whether worker w is stopped (SIGSTOP, a debugger's stop), from /proc: it cannot run, so it is
  // not stuck. False when that cannot be told.
  bool stopped(std::uint32_t w) const noexcept;

  // Sends every worker the stop sentinel, waits up to `grace` for them, kills the rest, reaps all.
  // Idempotent; never throws.
  void stop(std::chrono::milliseconds grace) noexcept;
  // In a process forked from the owner: closes this copy's descriptors and forgets the fork server
  // without a message to it or a stop sentinel in a ring, so that the owner's workers go on
  // undisturbed. Afterwards the pool does nothing. Never throws.
  void disown() noexcept;

 private:
  // Empties a dead worker's task ring and keeps its CPU time.
  void retire_channel(std::uint32_t worker) noexcept;

  std::shared_ptr<SlotPool> slots_;
  std::shared_ptr<const DatasetSpec> dataset_;
  std::uint32_t num_workers_;
  Lifeline lifeline_;         // its write end: this process only, not its fork() children
  UniqueFd done_event_;       // any worker finished a slot
  UniqueFd interrupt_event_;  // the trainer's alone: not kept in the children
  std::vector<UniqueFd> task_events_;
  std::unique_ptr<ForkServer> server_;
  std::function<void(std::uint32_t)> worker_main_;  // the fork-only path's
  std::vector<int> keep_;
  int oom_score_adj_ = 0;
  std::optional<ExecStart> exec_;     // how the fork server was started by exec, to start another
  std::uint64_t retired_cpu_ns_ = 0;  // CPU time of workers that died and were replaced
  std::uint64_t wakes_ = 0;
  bool reports_pending_ = true;  // the server's socket may hold an exit report (poll_exit)
  std::chrono::steady_clock::time_point next_exit_look_{};
};

// "worker 1 (pid 4242) was killed by signal SIGKILL while loading batch 3 of epoch 0 (samples 7,
// 9, ...); SIGKILL often comes from the out-of-memory killer (see dmesg)". `held` says what the
// worker had in hand ("while idle", or the batch).
std::string describe_worker_death(const WorkerExit& exit, const std::string& held);

}  // namespace stoker::detail
