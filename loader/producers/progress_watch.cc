#include "loader/producers/progress_watch.h"

#include <algorithm>

namespace stoker::detail {

ProgressWatch::ProgressWatch(std::uint32_t num_workers, std::chrono::milliseconds timeout)
    : workers_(num_workers), timeout_(timeout) {}

void ProgressWatch::reset(std::uint32_t w) noexcept { workers_[w] = State{}; }

bool ProgressWatch::look(std::uint32_t w, std::uint64_t progress, bool has_work, const std::function<bool()>& stopped,
                         Clock::time_point now) {
  State& s = workers_[w];
  if (!has_work || !s.watching || progress != s.progress) {
    s = State{has_work, progress, now, {}};
    return false;
  }
  if (now - s.last_look < kMinStep) return false;
  const Clock::duration step = std::min<Clock::duration>(now - s.last_look, kMaxStep);
  s.last_look = now;
  if (step.count() > 0 && !stopped()) s.stalled += step;
  return timeout_.count() > 0 && s.stalled >= timeout_;
}

std::chrono::milliseconds ProgressWatch::stalled(std::uint32_t w) const noexcept {
  return std::chrono::duration_cast<std::chrono::milliseconds>(workers_[w].stalled);
}

}  // namespace stoker::detail
