#include "loader/producers/auto_tuner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

namespace stoker::detail {

AutoTuner::AutoTuner(Limits limits)
    : limits_(limits),
      workers_(std::clamp<std::uint32_t>(limits.start_workers, 1, std::max<std::uint32_t>(limits.max_workers, 1))),
      prefetch_(std::max<std::uint32_t>(limits.start_prefetch, 1)) {
  while (prefetch_ > 1 && depth() > limits_.max_depth) --prefetch_;
}

std::uint32_t AutoTuner::depth() const noexcept {
  return std::min<std::uint32_t>(workers_ * prefetch_, std::max<std::uint32_t>(limits_.max_depth, 1));
}

bool AutoTuner::observe(std::uint64_t batches, double seconds, double waited_seconds, double busy_seconds) {
  if (settled_) return false;
  batches_ += batches;
  const bool changed = step(batches, seconds, waited_seconds, busy_seconds);
  if (settled_) settled_after_ = batches_;
  return changed;
}

bool AutoTuner::step(std::uint64_t batches, double seconds, double waited_seconds, double busy_seconds) {
  if (batches == 0 || seconds <= 0) return false;
  if (skip_ > 0) {
    --skip_;
    return false;
  }
  const double throughput = static_cast<double>(batches) / seconds;
  const double stall = waited_seconds / seconds;
  // The workers the loop needs: a worker fills a batch in `fill` seconds, the loop uses one every
  // `use` seconds when it does not wait.
  const double fill = busy_seconds / static_cast<double>(batches);
  const double use = std::max(seconds - waited_seconds, 0.0) / static_cast<double>(batches);
  // Judged on the better of two intervals on each side of a step: one interval may straddle an
  // epoch's end (its drain and the next epoch's first batch) and read low; and the workers needed
  // are the fewer the two say (a worker's first pass, slower, may still be in the first).
  recent_[seen_ % 2] = throughput;
  recent_need_[seen_++ % 2] = use > 0 ? std::ceil(fill / use) : static_cast<double>(limits_.max_workers);
  if (seen_ < 2) return false;
  const double best_recent = std::max(recent_[0], recent_[1]);
  if (pending_ != Step::none) {
    if (const std::optional<bool> changed = judge(best_recent)) return *changed;
  }
  if (stall <= kStallToGrow) return false;  // the loop hardly waits: nothing to gain now
  before_ = best_recent;
  seen_ = 0;  // the next two intervals judge the step
  stepped_ = true;
  const double busy = busy_seconds / (workers_ * seconds);
  const double needed = std::min(recent_need_[0], recent_need_[1]);
  if (busy >= kBusyForWorkers && limits_.tune_workers && workers_ < limits_.max_workers &&
      (workers_ + 1) * prefetch_ <= limits_.max_depth) {
    std::uint32_t to = workers_ + 1;
    const bool jump = !jumped_;  // the first step goes where the stage times point, at once
    if (jump) {
      jumped_ = true;
      to = static_cast<std::uint32_t>(std::clamp<double>(needed, to, limits_.max_workers));
      while (to > workers_ + 1 && to * prefetch_ > limits_.max_depth) --to;
    }
    from_workers_ = workers_;
    workers_ = to;
    if (jump && needed >= limits_.max_workers && workers_ == limits_.max_workers) {
      // The stage times say the loop needs every core, and every core works: no more workers to
      // try, and the workers' idle share, measured with fewer of them and a shallower ring, says
      // nothing of a deeper ring. Judging one takes hundreds of batches on a shared machine (it
      // gains a few percent), so the ring goes as deep as half the last-level cache holds: the
      // loop's and the workers' slack there (3 KB records in batches of 256 on 2 cores: 2 x 4
      // beat 2 x 2 by 7%), its slots no longer sharing the cache beyond it (150 KB records in
      // batches of 32, 4.7 MB slots: 2 x 3 lost 13% to 2 x 2).
      if (limits_.tune_prefetch) {
        const std::uint32_t fits = std::min(limits_.cached_depth, limits_.max_depth) / workers_;
        prefetch_ = std::max(prefetch_, std::min(fits, kAutoMaxPrefetch));
      }
      settled_ = true;
      return true;
    }
    pending_ = Step::worker;
    skip_ = kWorkerWarmupIntervals;
    return true;
  }
  // Workers that idle wait for a free slot; busy ones that cannot be joined by another may still
  // idle a little, which a deeper ring may fill: tried, and judged. Never idle: nothing to fill.
  if (busy < kBusyToDeepen && limits_.tune_prefetch && workers_ * (prefetch_ + 1) <= limits_.max_depth) {
    ++prefetch_;
    pending_ = Step::prefetch;
    return true;
  }
  settled_ = true;  // nothing left that could help
  return false;
}

std::optional<bool> AutoTuner::judge(double best_recent) {
  const Step judged = std::exchange(pending_, Step::none);
  if (judged == Step::recheck) {
    // Back at the shallower ring: the deeper one is kept only if it beat these intervals too.
    if (deeper_ >= std::max(before_, best_recent) * kGainToGrow) {
      ++prefetch_;
      seen_ = 0;  // the next step is judged against intervals of the deeper ring
      return true;
    }
    settled_ = true;
    return false;
  }
  // A deeper ring must prove itself: it costs memory, and on large samples its slots stop sharing
  // the caches, which a gain within the noise may hide. More workers are taken back only when
  // clearly slower: the throughput before them was measured on shorter intervals, which vary more.
  const double keep = judged == Step::prefetch ? before_ * kGainToGrow : before_ / kGainToGrow;
  if (best_recent < keep) {
    // The step made it slower (a deeper ring: not clearly faster): take it back, and stop.
    if (judged == Step::worker) workers_ = from_workers_;
    if (judged == Step::prefetch) --prefetch_;
    settled_ = true;
    return true;
  }
  if (judged == Step::prefetch) {
    // Clearly faster: set back for two intervals, which tell a gain of the ring from the rise of
    // the throughput while the workers' first passes fill their page tables. The one before them
    // is not judged: batches issued to the deeper ring still arrive in it.
    deeper_ = best_recent;
    --prefetch_;
    pending_ = Step::recheck;
    seen_ = 0;
    skip_ = 1;
    return true;
  }
  if (best_recent < before_ * kGainToGrow) {
    // No slower, but not clearly faster either: a gain this small is as likely as not the
    // measurement's noise. Keep the worker (taking back a real gain would cost the training loop;
    // keeping a useless one costs little while the loop waits for data) and stop.
    settled_ = true;
    return false;
  }
  return std::nullopt;  // clearly faster: on to the next step
}

std::string AutoTuner::describe() const {
  return fmt::format("{} worker{}, prefetch {} (auto: {})", workers_, workers_ == 1 ? "" : "s", prefetch_,
                     settled_ ? fmt::format("settled after {} batches", settled_after_) : "tuning");
}

}  // namespace stoker::detail
