#include "loader/producers/task_table.h"

#include <algorithm>
#include <cassert>

namespace stoker::detail {

TaskTable::TaskTable(std::uint32_t depth, std::uint32_t num_workers)
    : depth_(depth),
      tasks_(depth),
      outstanding_(num_workers, 0),
      unfinished_(num_workers, 0),
      active_workers_(num_workers),
      active_depth_(depth) {
  assert(depth > 0);
}

void TaskTable::start(std::uint64_t first, std::uint64_t end) {
  assert(in_flight() == 0);
  received_ = issued_ = first;
  end_ = end;
  next_turn_ = 0;
}

void TaskTable::set_active(std::uint32_t workers, std::uint32_t depth) noexcept {
  active_workers_ = std::clamp<std::uint32_t>(workers, 1, static_cast<std::uint32_t>(outstanding_.size()));
  active_depth_ = std::clamp<std::uint32_t>(depth, 1, depth_);
}

std::uint32_t TaskTable::least_loaded_worker() const noexcept {
  const std::uint32_t workers = active_workers_;
  std::uint32_t best = next_turn_ % workers;
  for (std::uint32_t k = 1; k < workers; ++k) {
    const std::uint32_t w = (next_turn_ + k) % workers;
    if (unfinished_[w] < unfinished_[best]) best = w;
  }
  return best;
}

std::uint32_t TaskTable::worker_for_next() const noexcept {
  const std::uint32_t workers = active_workers_;
  if (affinity_span_ > 0 && workers > 1) {
    const auto preferred = static_cast<std::uint32_t>((issued_ / affinity_span_) % workers);
    const std::uint64_t share = (active_depth_ + workers - 1) / workers;
    if (outstanding_[preferred] < share) return preferred;
  }
  return least_loaded_worker();
}

std::uint64_t TaskTable::issue(std::uint32_t slot, std::uint32_t worker) {
  assert(can_issue() && worker < outstanding_.size());
  tasks_[issued_ % depth_] = Task{slot, worker, false};
  ++outstanding_[worker];
  ++unfinished_[worker];
  next_turn_ = worker + 1;
  return issued_++;
}

bool TaskTable::mark_arrived(std::uint64_t batch) noexcept {
  if (batch < received_ || batch >= issued_) return false;
  Task& task = tasks_[batch % depth_];
  if (!task.arrived) --unfinished_[task.worker];
  task.arrived = true;
  return true;
}

TaskTable::Task TaskTable::receive() {
  assert(in_flight() > 0);
  Task t = tasks_[received_ % depth_];
  --outstanding_[t.worker];
  if (!t.arrived) --unfinished_[t.worker];
  ++received_;
  return t;
}

std::optional<std::uint64_t> TaskTable::pending_in(std::uint32_t slot, std::uint32_t worker) const noexcept {
  for (std::uint64_t t = received_; t < issued_; ++t) {
    const Task& task = tasks_[t % depth_];
    if (task.slot == slot && task.worker == worker && !task.arrived) return t;
  }
  return std::nullopt;
}

std::vector<std::uint32_t> TaskTable::pending_slots_of(std::uint32_t worker) const {
  std::vector<std::uint32_t> out;
  for (std::uint64_t t = received_; t < issued_; ++t) {
    const Task& task = tasks_[t % depth_];
    if (task.worker == worker && !task.arrived) out.push_back(task.slot);
  }
  return out;
}

std::optional<std::uint64_t> TaskTable::pending_of(std::uint32_t worker) const noexcept {
  for (std::uint64_t t = received_; t < issued_; ++t) {
    const Task& task = tasks_[t % depth_];
    if (task.worker == worker && !task.arrived) return t;
  }
  return std::nullopt;
}

}  // namespace stoker::detail
