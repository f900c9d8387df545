#include "loader/time_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "loader/nvtx.h"
#include "loader/producers/auto_tuner.h"
#include "loader/worker/stage_times.h"

namespace stoker::detail {

void TimeReport::set_stage_names(std::vector<std::string> names) {
  names_ = std::move(names);
  ns_.assign(names_.size(), 0);
}

void TimeReport::add_batch(const FillFacts& h, std::uint32_t slots_in_use) {
  const std::span<const std::uint64_t> stage_ns(h.stage_ns);
  for (std::size_t i = 0; i < ns_.size() && i < stage_ns.size(); ++i) ns_[i] += stage_ns[i];
  if (!trace_) return;
  // The batch on its worker's track, its stages inside it one after the other in the order they
  // run (the read, the operations, the transform, the writes), each the sum over its samples.
  const std::uint32_t track = TraceWriter::worker_track(h.worker);
  Clock::time_point at{std::chrono::nanoseconds(h.started_ns)};
  trace_->span(track, fmt::format("batch {}", h.batch_index), at, std::chrono::nanoseconds(h.busy_ns),
               fmt::format(R"("epoch":{},"samples":{})", h.epoch, h.num_samples));
  const auto stage = [&](std::size_t i) {
    if (i >= names_.size() || stage_ns[i] == 0) return;
    trace_->span(track, names_[i], at, std::chrono::nanoseconds(stage_ns[i]));
    at += std::chrono::nanoseconds(stage_ns[i]);
  };
  stage(kStageRead);
  for (std::size_t i = kStageOps; i < names_.size(); ++i) stage(i);
  stage(kStageTransform);
  stage(kStageWrite);
  if (h.shard_opens) trace_->instant(track, fmt::format("{} shard opens", h.shard_opens), at);
  trace_->counter("slots in use", Clock::now(), slots_in_use);
  trace_->flush();
}

void TimeReport::delivered(Clock::time_point now, std::uint64_t index) {
  out_since_ = now;
  if (std::exchange(first_of_epoch_, false) && asked_since_)
    first_wait_seconds_ += std::chrono::duration<double>(now - *asked_since_).count();
  if (trace_ && asked_since_) trace_->span(0, fmt::format("wait: batch {}", index), *asked_since_, now - *asked_since_);
  end_wait();
}

void TimeReport::end_wait() noexcept {
  if (asked_since_) nvtx_range_end(nvtx_wait_);
  asked_since_.reset();
}

void TimeReport::came_back(Clock::time_point now) {
  if (!asked_since_) {
    asked_since_ = now;
    nvtx_wait_ = nvtx_range_start("stoker.wait");
  }
  if (!out_since_) return;
  step_seconds_ += std::chrono::duration<double>(now - *out_since_).count();
  if (trace_) trace_->span(0, "step", *out_since_, now - *out_since_);
  out_since_.reset();
}

void TimeReport::epoch_ended() {
  end_wait();
  first_of_epoch_ = true;
  if (trace_) trace_->flush(true);
}

void TimeReport::fill(Stats& s) const {
  s.stages.clear();
  for (std::size_t i = 0; i < names_.size(); ++i) s.stages.push_back({names_[i], static_cast<double>(ns_[i]) * 1e-9});
  s.step_seconds = step_seconds_;
  s.first_wait_seconds = std::min(first_wait_seconds_, s.wait_seconds);
}

namespace {

// Fewer batches than this say nothing yet: the first ones carry the workers' start.
constexpr std::uint64_t kVerdictBatches = 8;
// Below this share of the loop spent waiting, the loader keeps up.
constexpr double kKeepsUp = 0.10;
// Workers busy less than this share of the loop's time while it waits have batches missing (the
// automatic tuner deepens the ring then, and adds workers otherwise).
constexpr double kWorkersBusy = AutoTuner::kBusyForWorkers;
// Workers whose CPU time is less than this share of their busy time wait on storage.
constexpr double kOnCpu = 0.50;

int pct(double share) { return static_cast<int>(std::lround(100 * std::clamp(share, 0.0, 1.0))); }

std::string cheaper(const std::string& stage) {
  if (stage.find("decode+") != std::string::npos)
    return " (it already decodes only each crop's region, at the smallest scale that covers it: store smaller images)";
  if (stage.find("decode") != std::string::npos) {
    return " (decode(H,W) decodes at a reduced scale; a random_resized_crop or center_crop right after decode decodes "
           "only its region)";
  }
  if (stage == "transform") return " (the transform runs per sample: move its work into pipeline operations)";
  if (stage == "read") {
    return fmt::format(
        " (reading copies each sample's bytes and inflates compressed HDF5: fewer {}, or a lighter "
        "compression, cost less)",
        option_name("fields"));
  }
  return "";
}

// The verdict on the epochs' steady state: what limits throughput, and what to change.
std::string steady_verdict(const Stats& s, const VerdictContext& context) {
  if (s.batches < kVerdictBatches) return fmt::format("too few batches to tell yet ({})", s.batches);
  // Each epoch's first wait is its start's (the workers', the files'), not the steady state's.
  const double wait = std::max(0.0, s.wait_seconds - s.first_wait_seconds);
  const double loop = wait + s.step_seconds;
  const double waits = loop > 0 ? wait / loop : 0;
  if (waits < kKeepsUp) {
    return fmt::format(
        "the training step limits throughput: it waits for data {}% of the time, and nothing in the "
        "loader would change that",
        pct(waits));
  }
  const double staged = std::accumulate(s.stages.begin(), s.stages.end(), 0.0,
                                        [](double a, const StageTime& t) { return a + t.seconds; });
  const auto top = std::max_element(s.stages.begin(), s.stages.end(),
                                    [](const StageTime& a, const StageTime& b) { return a.seconds < b.seconds; });
  const std::string stage = top != s.stages.end() && top->seconds > 0 ? top->name : "read";
  const double share = top != s.stages.end() && staged > 0 ? top->seconds / staged : 0;
  if (s.fetch_wait_seconds > 0.5 * s.wait_seconds) {
    return fmt::format(
        "remote shards: the loop waits {}% of the time, mostly for shards still being fetched ({} fetched, {} "
        "evicted to make room): a larger {} fetches fewer again, a larger {} fetches faster",
        pct(waits), s.downloads, s.evictions, option_name("cache_limit"), option_name("fetch_parallelism"));
  }
  if (s.workers == 0) {
    return fmt::format(
        "loading runs in the training loop's thread ({}% of the loop, {}% of it in '{}'): set "
        "num_workers (this process may use {} CPUs)",
        pct(waits), pct(share), stage, context.usable_cpus);
  }
  if (context.staged && s.h2d_seconds > 0.5 * wait) {
    return fmt::format(
        "the consumer's copies to the device: the loop waits {}% of the time, mostly for them: {} copies "
        "straight from the ring",
        pct(waits), option_setting("staging", "Options::staging = Staging::registered_shm", "registered_shm"));
  }
  const double busy = s.worker_busy_seconds / (static_cast<double>(s.workers) * loop);
  if (busy < kWorkersBusy) {
    return fmt::format(
        "the ring's depth: the loop waits {}% of the time while the workers are busy {}% of it: "
        "raise prefetch (prefetch_factor) so that they always have a batch to fill",
        pct(waits), pct(busy));
  }
  const double on_cpu = s.worker_busy_seconds > 0 ? s.worker_cpu_seconds / s.worker_busy_seconds : 1;
  if (on_cpu < kOnCpu && stage == "read") {
    return fmt::format(
        "storage reads: the loop waits {}% of the time; the workers spend {}% of theirs reading and "
        "are on a CPU {}% of it: {}more workers overlap more reads",
        pct(waits), pct(share), pct(on_cpu), context.quasi_random ? "" : "order='quasi_random' reads in long runs, ");
  }
  if (s.workers < context.usable_cpus) {
    return fmt::format(
        "the workers' CPU: the loop waits {}% of the time, and the workers spend {}% of theirs in "
        "'{}': add workers ({} of {} CPUs in use)",
        pct(waits), pct(share), stage, s.workers, context.usable_cpus);
  }
  return fmt::format(
      "the workers' CPU, a worker per CPU: the loop waits {}% of the time, and the workers spend {}% "
      "of theirs in '{}': make it cheaper{}",
      pct(waits), pct(share), stage, cheaper(stage));
}

}  // namespace

std::string verdict(const Stats& s, const VerdictContext& context) {
  std::string v = steady_verdict(s, context);
  // Remote shards fetched while the Loader was built: time before the first batch, not a wait of
  // an epoch's, and said apart.
  if (context.built_downloads > 0) {
    v += fmt::format("; before the first batch, {:.1f} s went to fetching {} remote shard{} ({}) into the cache",
                     s.fetch_seconds, context.built_downloads, context.built_downloads == 1 ? "" : "s",
                     format_bytes(context.built_download_bytes));
  }
  return v;
}

}  // namespace stoker::detail
