// Where the time goes (docs/observability.md): the workers' stage times summed over the batches
// delivered, the consumer's step (its time between batches), and the one-line verdict drawn from
// them and the rest of Stats. Not synchronised: the Loader holds its stats lock around each call.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "loader/producers/filled_batch.h"
#include "loader/trace_writer.h"
#include "stoker/stats.h"

namespace stoker::detail {

class TimeReport {
 public:
  using Clock = std::chrono::steady_clock;
  TimeReport() = default;
  ~TimeReport() { end_wait(); }  // a wait still open (the consumer stopped, or was interrupted)
  TimeReport(const TimeReport&) = delete;
  TimeReport& operator=(const TimeReport&) = delete;

  // The workers' stages, as the slots hold them (worker_stage_names()).
  void set_stage_names(std::vector<std::string> names);
  // Where the events go as well (Options::trace); none by default. Kept alive by the caller.
  void set_trace(TraceWriter* trace) noexcept { trace_ = trace; }
  // A delivered batch's stage times and, for the trace, how it was filled and the slots then in use.
  void add_batch(const FillFacts& facts, std::uint32_t slots_in_use);
  // The consumer handed batch `index` out at `now` / came back for the next one: the time between
  // is its step. Coming back without a batch out counts nothing.
  void delivered(Clock::time_point now, std::uint64_t index);
  void came_back(Clock::time_point now);
  // An epoch starts (its first batch's wait is its start's: Stats::first_wait_seconds) / the
  // consumer reached its end (the trace is written out).
  void epoch_started() noexcept {
    end_wait();  // a wait for the epoch before is over
    first_of_epoch_ = true;
  }
  // The consumer's call for a batch failed: its wait is over (the next call's is a new one).
  void wait_failed() noexcept { end_wait(); }
  void epoch_ended();
  // Sets s.stages (every named stage, in order) and s.step_seconds.
  void fill(Stats& s) const;

 private:
  void end_wait() noexcept;  // the consumer's wait is over (its NVTX range ends)
  std::vector<std::string> names_;
  std::vector<std::uint64_t> ns_;
  double step_seconds_ = 0;
  std::optional<Clock::time_point> out_since_;
  std::optional<Clock::time_point> asked_since_;  // the consumer's wait for its next batch began
  bool first_of_epoch_ = true;                    // the next batch delivered is its epoch's first
  double first_wait_seconds_ = 0;
  TraceWriter* trace_ = nullptr;
  std::uint64_t nvtx_wait_ = 0;  // the NVTX range of the wait since asked_since_ (loader/nvtx.h)
};

// What the verdict knows beside Stats.
struct VerdictContext {
  unsigned usable_cpus = 1;
  // Options::order is already quasi_random, or cannot be (a mix): nothing to suggest about it.
  bool quasi_random = false;
  bool staged = false;  // batches go to a device through staging copies
  // Remote shards fetched while the Loader was built (the rest of Stats::downloads came later).
  std::uint64_t built_downloads = 0, built_download_bytes = 0;
};

// One line: what limits throughput, from `s`'s numbers by the rule in docs/observability.md, and
// what to change.
std::string verdict(const Stats& s, const VerdictContext& context);

}  // namespace stoker::detail
