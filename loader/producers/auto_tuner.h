// AutoTuner: chooses how many workers and how many batches in flight per worker, for
// Options::num_workers / prefetch = stoker::kAuto, from what the training loop experiences.
//
// It starts small (1 worker, prefetch 2, or the fixed value where only one is automatic) and
// measures intervals of the consumer's loop (at least 16 batches and 5 ms each, across epochs; 8
// before the first step, which they only aim; the wait for the first batch, while workers open the
// dataset, is not counted): the share of the time it waited for data (stall), the batches per
// second, and the time the active workers spent filling the batches that arrived in it. While the
// stall is above 5% it takes the step the verdict's rule (docs/observability.md) points to: workers
// busy at least 60% of the time are the limit, so more workers while there are idle forked ones;
// workers idle more than that wait for a free slot, so one more batch in flight per worker while
// the ring has room (tried too for busy workers no worker can join, unless they never idle: a
// deeper ring fills no idle time).
//
// The first step to more workers goes at once where the stage times point: a worker fills a batch
// in F seconds and the loop, when it does not wait, uses one every U seconds, so it needs F / U
// workers (the fewer of two intervals' counts; at least one more than now, at most every forked
// one). Where that is every core, no more workers are left to try and the tuner settles there, two
// intervals after it started, with the ring as deep as half the last-level cache holds (the
// workers' idle share, measured with fewer of them and a shallower ring, says nothing of the ring
// they then have, and judging a deeper one takes hundreds of batches). Every other step is judged:
// the better of the next two intervals (of 20 ms at least: short ones vary with the scheduler)
// against the better of the two before it. Slower (more workers: by 5%, the intervals before them
// being the shorter ones), and the step is taken back (a jump: to where it started); less than 5%
// faster, and a worker is kept (on a shared machine intervals vary by 10% and more, so a small gain
// cannot be told from noise, and taking back a real one would cost more than keeping a useless one
// while the loop waits) but a deeper ring is taken back (it costs memory, and on large samples its
// slots stop sharing the caches, which a gain within the noise may hide); either way the tuner
// settles: more does not help. At least 5% faster, it goes on, one step at a time; but a deeper
// ring is first set back for two intervals and kept only if it was 5% faster than those too:
// throughput rises on its own while the workers' first passes fill their page tables (an epoch of
// 150 KB records here ran at 40% of its later pace, the next ones at 55, 65, 75%), and judged
// against the intervals before it alone, a useless deeper ring looked faster (with 2 workers fixed,
// prefetch went to 4, 10% slower than 2, after 250 batches). A new worker's first two intervals are
// not judged: the worker opens the dataset then and, on a memory-mapped one, fills its page tables
// (its first pass runs well below its pace). Pure logic, fed measurements: unit-tested without
// processes or clocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace stoker::detail {

// The deepest ring automatic prefetch reserves, per worker. Deeper rings measured slower here on
// large samples (a 16-slot ring of 4.7 MB batches: 118k samples/s against 157k for 4 slots),
// whatever depth is active: their slots no longer share the caches.
inline constexpr std::uint32_t kAutoMaxPrefetch = 4;

class AutoTuner {
 public:
  struct Limits {
    std::uint32_t max_workers = 1;  // forked
    std::uint32_t max_depth = 2;    // slots in the ring
    bool tune_workers = true;
    bool tune_prefetch = true;
    std::uint32_t start_workers = 1;
    std::uint32_t start_prefetch = 2;
    // The most slots in rotation whose bytes fit in half the last-level cache (0: unknown): how deep
    // the ring goes where nothing can be judged (every core taken at once).
    std::uint32_t cached_depth = 0;
  };
  explicit AutoTuner(Limits limits);

  std::uint32_t workers() const noexcept { return workers_; }
  std::uint32_t prefetch() const noexcept { return prefetch_; }
  // Slots the active workers may have in flight.
  std::uint32_t depth() const noexcept;
  bool settled() const noexcept { return settled_; }
  // How long an interval must last, at least min_batches() batches: longer while a step is judged,
  // which compares the throughputs of intervals (short ones vary with the scheduler's whims).
  double min_seconds() const noexcept { return pending_ != Step::none ? kMinJudgedSeconds : kMinSeconds; }
  // And how many batches it must hold: fewer before the first step. Those intervals only say how far
  // it goes (the jump's target is the fewer workers two intervals say the loop needs; the gain is
  // judged after it, on longer ones), and every batch the loop waits for one worker costs: the
  // first epoch of a short job ran at 2/3 of a fixed configuration's pace with the step after 48.
  std::uint64_t min_batches() const noexcept { return stepped_ ? kMinBatches : kMinFirstBatches; }

  // One interval of the consumer's loop: `batches` received in `seconds`, of which it waited
  // `waited_seconds`, and which the workers spent `busy_seconds` filling (all workers together).
  // Returns true when the configuration changed.
  bool observe(std::uint64_t batches, double seconds, double waited_seconds, double busy_seconds);

  // An interval that is not observed (the first, while workers open the dataset): its batches
  // count towards the number the tuner settled after.
  void skip(std::uint64_t batches) noexcept {
    if (!settled_) batches_ += batches;
  }

  // "2 workers, prefetch 3 (auto: settled after 144 batches)", "1 worker, prefetch 2 (auto: tuning)"
  std::string describe() const;

  static constexpr std::uint64_t kMinBatches = 16;
  static constexpr std::uint64_t kMinFirstBatches = 8;
  static constexpr double kMinSeconds = 0.005;
  static constexpr double kMinJudgedSeconds = 0.02;
  static constexpr double kStallToGrow = 0.05;
  // The active workers' busy share at which they are the limit, as the verdict judges it
  // (loader/time_report.cc): below it they wait for a free slot.
  static constexpr double kBusyForWorkers = 0.6;
  static constexpr double kBusyToDeepen = 0.95;  // busier workers gain nothing from a deeper ring
  static constexpr double kGainToGrow = 1.05;
  static constexpr std::uint64_t kWorkerWarmupIntervals = 2;  // 40 ms at least

 private:
  enum class Step { none, worker, prefetch, recheck };
  bool step(std::uint64_t batches, double seconds, double waited_seconds, double busy_seconds);
  // The step taken two intervals ago (`pending_`), judged on the better of the two since: the
  // answer for observe() when the judgment ends the call (a step taken back, the ring set back or
  // restored, settled), nullopt when the step was clearly faster and the next may be taken.
  std::optional<bool> judge(double best_recent);
  Limits limits_;
  std::uint32_t workers_, prefetch_;
  Step pending_ = Step::none;       // the step being judged
  double before_ = 0;               // throughput before it (the better of two intervals)
  double deeper_ = 0;               // with the deeper ring, while the shallower one is measured again
  double recent_[2] = {0, 0};       // the last two intervals' throughputs
  double recent_need_[2] = {0, 0};  // and the workers each says the loop needs
  std::uint64_t seen_ = 0;          // intervals since the last step
  std::uint64_t skip_ = 0;          // intervals still to be ignored (a new worker warming up)
  bool settled_ = false;
  bool jumped_ = false;
  bool stepped_ = false;             // a step was taken: intervals hold kMinBatches
  std::uint64_t batches_ = 0;        // observed and skipped so far
  std::uint64_t settled_after_ = 0;  // batches_ when it settled
  std::uint32_t from_workers_ = 0;   // the workers before the step being judged
};

}  // namespace stoker::detail
