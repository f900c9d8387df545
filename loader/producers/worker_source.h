// WorkerSource: batches loaded by worker processes, handed out in order.
//
// Keeps up to `depth` batches of the epoch in flight (loader/producers/task_table.h), each in a slot of its
// own given to the least-loaded worker (loader/processes/worker_pool.h), and waits for the next one in
// order. A worker that dies is reported at once, naming the batch it held; one that has not
// delivered within the timeout is reported as stuck. One thread at a time (the owner's host lock:
// loader/loader_impl.h), except interrupt().
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "loader/processes/worker_pool.h"
#include "loader/producers/auto_tuner.h"
#include "loader/producers/progress_watch.h"
#include "loader/producers/slot_source.h"
#include "loader/producers/task_table.h"
#include "stoker/stats.h"

namespace stoker::detail {

class WorkerSource final : public SlotSource {
 public:
  // What happens when a worker dies or is stuck: up to `max` replacements in the loader's life,
  // each said once through `warn`.
  struct RespawnPolicy {
    std::uint32_t max = 3;
    std::function<void(const std::string&)> warn;
    int oom_score_adj = 0;  // for the workers: under memory pressure, they die first (and are replaced)
  };
  // timeout: how long a worker with work may make no progress while it can run before it is
  // stuck (zero: no limit; loader/producers/progress_watch.h).
  WorkerSource(std::shared_ptr<SlotPool> slots, std::uint32_t depth, std::uint32_t num_workers,
               std::shared_ptr<const DatasetSpec> dataset, std::chrono::milliseconds timeout, RespawnPolicy respawn);

  void abandon() override;
  void start(const EpochPlan& plan, std::uint64_t first) override;
  std::uint32_t next_filled() override;
  bool wait_filled(std::chrono::steady_clock::time_point until) override;
  void interrupt() noexcept override {
    workers_.interrupt();
    if (gate_) gate_->interrupt();
  }
  pid_t server_pid() const noexcept { return workers_.server_pid(); }
  // Batches that share data come in runs of `batches` (0: none): see TaskTable::worker_for_next.
  void set_affinity_span(std::uint64_t batches) noexcept { tasks_.set_affinity_span(batches); }
  // Let `tuner` choose the active workers and depth from the consumer's waits (Options = kAuto);
  // `held_slots` slots of the ring beyond the tuner's depth are the training loop's to keep.
  void set_auto_tuner(std::unique_ptr<AutoTuner> tuner, std::uint32_t held_slots);
  // The tuner's choice, or nullptr without one.
  const AutoTuner* auto_tuner() const noexcept { return tuner_.get(); }

  void stop(std::chrono::milliseconds grace) noexcept override { workers_.stop(grace); }
  // WorkerPool::disown.
  void disown() noexcept override { workers_.disown(); }
  std::vector<int> pids() const override { return workers_.pids(); }
  // worker_cpu_seconds, respawns, consumer_wakes; with a tuner, its workers, depth (and the slots
  // the loop keeps) and auto_tuning.
  void add_stats(Stats& s) const override;

 private:
  // Issues batches while the window and the free slots allow.
  void issue();
  void collect();
  // The slots of w's unfinished batches, in order, their tasks written again from the plan: a
  // replacement loads what the consumer asked for, whatever the dead worker left in the headers.
  std::vector<std::uint32_t> rewrite_tasks_of(std::uint32_t w);
  // Replaces a worker that exited, its unfinished batches given to the replacement, or throws past
  // the respawn limit (or when the fork server is gone).
  void check_exits();
  // The fork server died (`death` says how): a new one and new workers, or the error.
  void restart_fork_server(const std::string& death);
  // Waits until task `batch` arrived (true) or `until` passed (false), replacing dead and stuck
  // workers meanwhile.
  bool wait_for(std::uint64_t batch,
                std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());
  // Kills (to be replaced) or reports the workers that have made no progress for the timeout.
  void look_for_stuck_workers();
  // The loader cannot continue: remembers why, and throws it (and again at every later call).
  [[noreturn]] void fail(ErrorCode code, const std::string& message);

  std::shared_ptr<SlotPool> slots_;
  std::string source_path_;  // named in every death: the file may be why
  WorkerPool workers_;
  TaskTable tasks_;
  ProgressWatch watch_;
  const EpochPlan* plan_ = nullptr;
  std::optional<Error> broken_;  // the loader cannot continue: why
  RespawnPolicy respawn_;
  std::uint64_t respawns_ = 0;
  std::vector<std::string> deaths_;  // every worker death so far, for the final error
  // Per sample: the workers that died while running a pipeline or transform on it.
  std::map<std::uint64_t, std::uint32_t> deaths_on_sample_;
  std::vector<std::uint64_t> digests_;  // per slot: its task's indices' digest (write_task)
  // Killed by us (stuck, a malformed slot), until its exit report: why, and since when. A worker
  // not ended kKillGrace after its SIGKILL (asleep in the kernel: a read on a dead NFS server) may
  // still write its slots, which are therefore never given to another: the loader stops instead.
  // Its time counts as the progress watch's does, in looks at most ProgressWatch::kMaxStep apart:
  // a job suspended meanwhile (SIGSTOP, docker pause) is not a worker that does not end.
  struct Killed {
    std::string why;
    std::uint32_t worker = 0;
    std::chrono::steady_clock::time_point last_look;
    std::chrono::steady_clock::duration waited{};
  };
  static constexpr std::chrono::seconds kKillGrace{10};
  std::map<pid_t, Killed> killed_;
  void kill_worker(std::uint32_t w, std::string why);
  void check_killed_have_ended(std::chrono::steady_clock::time_point now);
  // Auto-tuning: the tuner and the consumer's current interval.
  std::unique_ptr<AutoTuner> tuner_;
  std::uint32_t held_slots_ = 0;
  std::chrono::steady_clock::time_point interval_start_{};
  std::uint64_t interval_batches_ = 0;
  double interval_waited_ = 0;
  double interval_busy_ = 0;    // the workers' time filling the interval's batches
  bool interval_open_ = false;  // interval_start_ is set: the previous interval ended, or a wait began
  void open_interval(std::chrono::steady_clock::time_point now);
  // Whether the next batch to issue is held back by the gate (its shards are not cached yet);
  // throws the gate's error. gate_ready(): the same without the error (false).
  bool gated();
  bool gate_ready() noexcept;
  // issue() last stopped at the gate with a slot free: the ring has room that waits for shards, so
  // a wait for the batches in flight (fewer than the workers could fill) is for the shards still
  // being fetched as much as for them, and counts in Stats::fetch_wait_seconds with the gate's own
  // waits (nothing in flight).
  bool stopped_at_gate_ = false;
  double gate_starved_seconds_ = 0;
  bool warming_ = true;  // the first batch is still to come: workers open the dataset
};

}  // namespace stoker::detail
