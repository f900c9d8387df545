#include "loader/producers/worker_source.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>

#include <algorithm>
#include <utility>

#include "base/option_spelling.h"
#include "loader/producers/held_batches.h"
#include "loader/producers/slot_check.h"
#include "loader/producers/slot_task.h"

namespace stoker::detail {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

WorkerSource::WorkerSource(std::shared_ptr<SlotPool> slots, std::uint32_t depth, std::uint32_t num_workers,
                           std::shared_ptr<const DatasetSpec> dataset, std::chrono::milliseconds timeout,
                           RespawnPolicy respawn)
    : slots_(slots),
      source_path_(dataset->name()),
      workers_(std::move(slots), num_workers, std::move(dataset), respawn.oom_score_adj),
      tasks_(depth, num_workers),
      watch_(num_workers, timeout),
      respawn_(std::move(respawn)),
      digests_(slots_->num_slots(), 0) {}

void WorkerSource::fail(ErrorCode code, const std::string& message) {
  broken_.emplace(code, message);
  throw *broken_;
}

void WorkerSource::issue() {
  collect();  // what has arrived is no longer load (TaskTable::least_loaded_worker)
  stopped_at_gate_ = false;
  while (tasks_.can_issue()) {
    // An automatic depth is a ring of that many slots (and the held ones), as a fixed one is: the
    // batches the training loop holds beyond Options::held_batches take their share of it (a larger
    // share of the reserved ring in rotation is slower: its slots stop sharing the caches). One
    // batch is always in flight while a slot is free.
    if (tuner_ && tasks_.in_flight() > 0 && slots_->in_use() >= tuner_->depth() + held_slots_) break;
    if (gate_ && !gate_ready()) {  // its shards are not cached yet
      stopped_at_gate_ = slots_->in_use() < slots_->num_slots();
      break;
    }
    auto s = slots_->acquire();
    if (!s) break;
    digests_[*s] = write_task(slots_->view(), *s, *plan_, tasks_.next_to_issue());
    const std::uint32_t w = tasks_.worker_for_next();
    tasks_.issue(*s, w);
    workers_.assign(w, *s);
  }
}

std::vector<std::uint32_t> WorkerSource::rewrite_tasks_of(std::uint32_t w) {
  const std::vector<std::uint32_t> slots = tasks_.pending_slots_of(w);
  for (std::uint32_t s : slots) digests_[s] = write_task(slots_->view(), s, *plan_, *tasks_.pending_in(s, w));
  return slots;
}

void WorkerSource::collect() {
  workers_.collect([&](std::uint32_t w, std::uint32_t s) {
    std::string why;
    std::optional<std::uint64_t> t;
    if (s >= slots_->num_slots()) {
      why = fmt::format("slot {}, of {}", s, slots_->num_slots());
    } else if (!(t = tasks_.pending_in(s, w))) {
      why = fmt::format("slot {}, which holds no batch it was given", s);
    } else if (std::string bad =
                   check_filled_slot(slots_->view(), slots_->layout().schema(), s, *plan_, *t, digests_[s]);
               !bad.empty()) {
      why = fmt::format("slot {} (batch {} of epoch {}), and {}", s, *t, plan_->epoch, bad);
    }
    if (why.empty()) {
      tasks_.mark_arrived(*t);
      return;
    }
    // Nothing it wrote is used: it is killed, and its replacement loads its batches again.
    const pid_t pid = workers_.pid(w);
    kill_worker(w, fmt::format("worker {} (pid {}) reported a batch in {} and was killed", w, pid, why));
  });
}

void WorkerSource::restart_fork_server(const std::string& death) {
  deaths_.push_back(death);
  if (!workers_.can_restart_server() || respawns_ >= respawn_.max) {
    fail(ErrorCode::worker_died, fmt::format("{}; the loader cannot continue{}", death,
                                             workers_.can_restart_server()
                                                 ? fmt::format(" ({} is {})", option_name("max_respawns"), respawn_.max)
                                                 : std::string(" (a fork server is replaced only when the program "
                                                               "called stoker::init: docs/faults.md)")));
  }
  // Its workers die with it (PR_SET_PDEATHSIG); once none can write into a slot any more, what
  // they finished counts and the rest is loaded again by new workers, into the same slots. One
  // that SIGKILL does not end may still write: its slots are never given to another.
  if (const std::vector<pid_t> alive = workers_.bury_workers(); !alive.empty()) {
    fail(ErrorCode::worker_stuck,
         fmt::format("{}; its worker{} (pid {}) did not end within 11 s of it, SIGKILL included: a process asleep "
                     "in the kernel (state D: a read hung on an unreachable network file system, say) may still "
                     "write the batch slots it was filling, so they are not given to new workers and the loader "
                     "cannot continue",
                     death, alive.size() == 1 ? "" : "s", fmt::join(alive, ", ")));
  }
  collect();
  // Every worker of the dead server is gone (buried above): none that we killed will report its
  // exit, and a new worker may be given an old one's pid.
  for (auto& [pid, k] : killed_) deaths_.push_back(std::move(k.why));
  killed_.clear();
  std::vector<std::vector<std::uint32_t>> pending(workers_.size());
  std::size_t batches = 0;
  for (std::uint32_t w = 0; w < workers_.size(); ++w) {
    pending[w] = rewrite_tasks_of(w);
    batches += pending[w].size();
  }
  try {
    workers_.restart_server();
  } catch (const Error& e) {
    fail(e.code(), fmt::format("{}; starting a new one failed: {}", death, e.what()));
  }
  for (std::uint32_t w = 0; w < workers_.size(); ++w) {
    watch_.reset(w);
    for (std::uint32_t s : pending[w]) workers_.assign(w, s);
  }
  ++respawns_;
  if (respawn_.warn) {
    respawn_.warn(fmt::format(
        "{}; a new fork server (pid {}) and {} workers replace it (respawn {} of at most {}), and "
        "load the {} unfinished batch{} again",
        death, workers_.server_pid(), workers_.size(), respawns_, respawn_.max, batches, batches == 1 ? "" : "es"));
  }
}

void WorkerSource::check_exits() {
  std::optional<WorkerExit> exit;
  try {
    exit = workers_.poll_exit();
  } catch (const Error& e) {
    restart_fork_server(e.what());
    return;
  }
  if (!exit) return;
  collect();  // what it finished before it died counts
  std::string held = "while idle";
  std::optional<std::uint64_t> sample;  // the one it was running a pipeline or transform on
  if (auto t = tasks_.pending_of(exit->worker)) {
    auto samples = plan_->batch(*t);
    sample = workers_.working_on(exit->worker);
    if (sample && std::find(samples.begin(), samples.end(), *sample) == samples.end()) sample.reset();
    const std::size_t shown = std::min<std::size_t>(samples.size(), 8);
    const std::string listed = fmt::format(
        "samples {}{}", fmt::join(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
        samples.size() > 8 ? ", ..." : "");
    held = sample
               ? fmt::format("while loading sample {} of {} (batch {} of epoch {}: {})", *sample, source_path_, *t,
                             plan_->epoch, listed)
               : fmt::format("while loading batch {} of epoch {} ({} of {})", *t, plan_->epoch, listed, source_path_);
  }
  watch_.reset(exit->worker);
  std::string death = describe_worker_death(*exit, held);
  if (auto it = killed_.find(exit->pid); it != killed_.end()) {
    death = it->second.why;  // not the out-of-memory killer's SIGKILL: ours, for being stuck
    killed_.erase(it);
  }
  deaths_.push_back(death);
  const std::uint32_t killed_by_sample = sample ? ++deaths_on_sample_[*sample] : 0;
  if (respawns_ >= respawn_.max) {
    fail(ErrorCode::worker_died,
         fmt::format("stoker: {}{}; the loader cannot continue{}",
                     killed_by_sample > 1 ? fmt::format("sample {} of {} killed {} workers, each while a pipeline "
                                                        "or the transform ran on it (fix what crashes on it, or "
                                                        "remove it from the dataset); the last: ",
                                                        *sample, source_path_, killed_by_sample)
                                          : "",
                     death,
                     deaths_.size() > 1
                         ? fmt::format(" (all {} worker deaths: {})", deaths_.size(), fmt::join(deaths_, "; "))
                     : respawn_.max > 0 ? fmt::format(" ({} is {})", option_name("max_respawns"), respawn_.max)
                                        : ""));
  }
  // The replacement loads the dead worker's unfinished batches again, into the same slots: their
  // tasks (sample indices) are in the slots' headers, so they come out exactly as they would have.
  const std::vector<std::uint32_t> slots = rewrite_tasks_of(exit->worker);
  pid_t pid = -1;
  try {
    pid = workers_.respawn(exit->worker, slots);
  } catch (const Error& e) {
    fail(e.code(), fmt::format("stoker: {}; replacing it failed: {}", death, e.what()));
  }
  ++respawns_;
  if (respawn_.warn) {
    respawn_.warn(
        fmt::format("{}; replaced by pid {} (respawn {} of at most {}), which loads its {} unfinished "
                    "batch{} again",
                    death, pid, respawns_, respawn_.max, slots.size(), slots.size() == 1 ? "" : "es"));
  }
}

void WorkerSource::kill_worker(std::uint32_t w, std::string why) {
  if (killed_.emplace(workers_.pid(w), Killed{std::move(why), w, Clock::now()}).second) workers_.kill(w);
}

void WorkerSource::check_killed_have_ended(Clock::time_point now) {
  for (auto& [pid, k] : killed_) {
    k.waited += std::min<Clock::duration>(now - k.last_look, ProgressWatch::kMaxStep);
    k.last_look = now;
    // Ended, and only its report is late (the fork server busy, or stopped): not a worker that
    // does not end.
    if (k.waited < kKillGrace || workers_.has_ended(k.worker)) continue;
    fail(ErrorCode::worker_stuck,
         fmt::format("stoker: {}, but {} s later it has not ended: a process asleep in the kernel (state D: a read "
                     "hung on an unreachable network file system, say) ends only when its system call returns, and "
                     "until then it may still write the batch slots it was filling, so they are not given to "
                     "another worker and the loader cannot continue (where it waits: cat /proc/{}/stack, as root)",
                     k.why, std::chrono::duration_cast<std::chrono::seconds>(k.waited).count(), pid));
  }
}

void WorkerSource::look_for_stuck_workers() {
  const auto now = Clock::now();
  check_killed_have_ended(now);
  for (std::uint32_t w = 0; w < workers_.size(); ++w) {
    const std::optional<std::uint64_t> t = tasks_.pending_of(w);
    const bool stuck = watch_.look(
        w, workers_.progress(w), t.has_value(), [&] { return workers_.stopped(w); }, now);
    if (!stuck || killed_.contains(workers_.pid(w))) continue;
    const pid_t pid = workers_.pid(w);
    const std::optional<std::uint64_t> sample = workers_.working_on(w);
    const std::string what = fmt::format(
        "worker {} (pid {}) made no progress for {} ms {} while loading batch {} of epoch {} (it could run: it was "
        "not stopped)",
        w, pid, watch_.stalled(w).count(),
        sample ? fmt::format("on sample {} of {}", *sample, source_path_) : fmt::format("reading {}", source_path_), *t,
        plan_->epoch);
    if (respawns_ < respawn_.max) {
      // Killed, then replaced like a worker that died (its exit report comes next). ESRCH (it died
      // meanwhile) needs nothing more: its exit report comes either way.
      kill_worker(w, what + " and was killed");
      continue;
    }
    fail(ErrorCode::worker_stuck,
         fmt::format("stoker: {} and is still running (see where it is stuck with: gdb -p {}); raise {} if a "
                     "step of a batch (a read, one sample's pipeline) is legitimately that slow",
                     what, pid, option_name("timeout")));
  }
}

bool WorkerSource::wait_for(std::uint64_t t, Clock::time_point until) {
  for (;;) {
    workers_.await_slot(tasks_.at(t).slot);  // before the look: what arrives after it wakes us
    collect();
    if (tasks_.at(t).arrived) {
      workers_.await_slot(std::nullopt);
      return true;
    }
    check_exits();
    look_for_stuck_workers();
    const auto now = Clock::now();
    if (now >= until) {
      workers_.await_slot(std::nullopt);  // a slice of a wait: no wake left for a later one
      return false;
    }
    const auto step = std::min<Clock::duration>(until - now, ProgressWatch::kLookInterval);
    if (workers_.wait(std::chrono::ceil<std::chrono::milliseconds>(step)) == WorkerPool::Wake::interrupted) {
      throw Error(ErrorCode::interrupted, "stoker: the loader is shutting down");
    }
  }
}

bool WorkerSource::wait_filled(Clock::time_point until) {
  if (broken_) return true;  // next_filled() throws at once
  check_exits();
  issue();
  if (tasks_.in_flight() == 0 && gated()) {
    if (!gate_->wait_ready(tasks_.next_to_issue(), until)) return false;
    issue();
  }
  if (tasks_.in_flight() == 0) return true;  // next_filled() says every slot is held
  // A consumer that waits here before it takes the batch (in slices, from Epoch::wait or from
  // another thread's turn) waits for data as one inside next_filled() does: the tuner counts both.
  const auto t0 = Clock::now();
  open_interval(t0);
  const bool starved = stopped_at_gate_;
  const bool ready = wait_for(tasks_.next_to_receive(), until);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  if (tuner_ && !tuner_->settled()) interval_waited_ += waited;
  if (starved) gate_starved_seconds_ += waited;
  return ready;
}

bool WorkerSource::gate_ready() noexcept {
  try {
    return gate_->ready(tasks_.next_to_issue());
  } catch (...) {  // a fetch failed: gated() says so once nothing is in flight (every slot received)
    return false;
  }
}

bool WorkerSource::gated() {
  return gate_ && tasks_.next_to_issue() < plan_->num_batches && !gate_->ready(tasks_.next_to_issue());
}

void WorkerSource::open_interval(Clock::time_point now) {
  if (tuner_ && !interval_open_) {
    interval_start_ = now;
    interval_open_ = true;
  }
}

void WorkerSource::abandon() {
  if (broken_) throw *broken_;
  while (tasks_.in_flight() > 0) {
    wait_for(tasks_.next_to_receive());
    slots_->release(tasks_.receive().slot);
  }
}

void WorkerSource::start(const EpochPlan& plan, std::uint64_t first) {
  if (broken_) throw *broken_;
  plan_ = &plan;
  // An interval with no batch yet starts with the epoch's first wait, not during whatever the
  // training loop did between epochs (an evaluation, a checkpoint).
  if (interval_batches_ == 0) interval_open_ = false;
  tasks_.start(first, plan.num_batches);
  issue();  // workers start on the first batches before the first next()
}

void WorkerSource::add_stats(Stats& s) const {
  s.worker_cpu_seconds = workers_.cpu_seconds();
  s.respawns = respawns_;
  s.consumer_wakes = workers_.wakes();
  s.fetch_wait_seconds += gate_starved_seconds_;
  if (tuner_) {
    s.workers = tuner_->workers();
    s.depth = tuner_->depth() + held_slots_;
    s.auto_tuning = tuner_->describe();
  }
}

void WorkerSource::set_auto_tuner(std::unique_ptr<AutoTuner> tuner, std::uint32_t held_slots) {
  tuner_ = std::move(tuner);
  held_slots_ = held_slots;
  tasks_.set_active(tuner_->workers(), tuner_->depth());
}

std::uint32_t WorkerSource::next_filled() {
  if (broken_) throw *broken_;
  const auto t0 = Clock::now();
  open_interval(t0);
  check_exits();  // a dead worker is reported within WorkerPool::kExitLook, not only when its batch is due
  issue();
  if (tasks_.in_flight() == 0 && gated()) {
    gate_->wait_ready(tasks_.next_to_issue(), Clock::time_point::max());
    issue();
  }
  if (tasks_.in_flight() == 0) throw held_batches_error(*slots_, plan_->epoch);
  const bool starved = stopped_at_gate_;
  const auto w0 = Clock::now();
  wait_for(tasks_.next_to_receive());
  if (starved) gate_starved_seconds_ += std::chrono::duration<double>(Clock::now() - w0).count();
  const std::uint32_t s = tasks_.receive().slot;
  if (tuner_ && !tuner_->settled()) {
    const auto t1 = Clock::now();
    interval_waited_ += std::chrono::duration<double>(t1 - t0).count();
    interval_busy_ +=
        static_cast<double>(slots_->view().slot_header(s).busy_ns) * 1e-9;  // the worker's word: steers only the tuner
    ++interval_batches_;
    const double seconds = std::chrono::duration<double>(t1 - interval_start_).count();
    // The first batch's wait, while workers open the dataset, is an interval of its own, skipped.
    if (warming_ || (interval_batches_ >= tuner_->min_batches() && seconds >= tuner_->min_seconds())) {
      if (std::exchange(warming_, false)) {
        tuner_->skip(interval_batches_);
      } else if (tuner_->observe(interval_batches_, seconds, interval_waited_, interval_busy_)) {
        tasks_.set_active(tuner_->workers(), tuner_->depth());
      }
      // The next interval starts here, not at the next call: an interval of n batches then holds n
      // of the loop's uses of a batch as it holds n waits (short intervals would read fast).
      interval_batches_ = 0;
      interval_waited_ = interval_busy_ = 0;
      interval_start_ = t1;
    }
  }
  issue();  // the window moved on
  return s;
}

}  // namespace stoker::detail
