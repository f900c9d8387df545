#include "loader/device/staged_queue.h"

#include <fmt/format.h>

#include <chrono>
#include <tuple>

#include "loader/batch/kept_batches.h"
#include "stoker/error.h"

namespace stoker::detail {

std::uint64_t StagedQueue::request(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip,
                                   std::deque<Item>& stale) {
  std::uint64_t generation;
  {
    std::lock_guard lock(mu_);
    generation = ++generation_;
    request_ = Request{epoch, start_batch, skip};
    active_ = false;
    stale.swap(queue_);
  }
  cv_.notify_all();
  return generation;
}

std::optional<StagedQueue::Item> StagedQueue::pop(std::uint64_t generation, std::size_t num_buffers,
                                                  const std::function<bool()>& all_held, std::deque<Item>& stale) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  if (generation != generation_) {
    throw Error(ErrorCode::invalid_option,
                "stoker: this epoch was ended by a later call to Loader::epoch(); iterate the newest one");
  }
  for (;;) {
    if (failed_) std::rethrow_exception(failed_);
    while (!queue_.empty() && queue_.front().generation != generation) {
      stale.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    if (!queue_.empty()) break;
    if (!active_ && !request_ && !staging_) return std::nullopt;  // the epoch is over
    // While the staging thread is filling a buffer it will push something (its batch, the end, an
    // error), so waiting ends; its new batch already counts as held before it is queued.
    if (!staging_ && all_held()) {
      throw Error(ErrorCode::slots_held,
                  fmt::format("stoker: all {} device buffers are held by {}, so no batch can be staged: {}",
                              num_buffers, kept_batches(), let_batches_go()));
    }
    cv_.wait(lock);
  }
  Item item = std::move(queue_.front());
  queue_.pop_front();
  user_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cv_.notify_all();  // room in the queue
  return item;
}

bool StagedQueue::wait_ready(std::uint64_t generation, const std::function<bool()>& all_held,
                             std::chrono::steady_clock::time_point until) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  const bool ready = [&] {
    for (;;) {
      if (generation != generation_ || failed_) return true;
      for (const Item& item : queue_) {
        if (item.generation == generation) return true;
      }
      if (!active_ && !request_ && !staging_) return true;
      if (!staging_ && all_held()) return true;  // as in pop()
      if (cv_.wait_until(lock, until) == std::cv_status::timeout) return false;
    }
  }();
  // Time spent here is the training loop waiting for data, as in next(): a consumer that waits in
  // slices (the Python package, to see Ctrl-C) stalls as much as one that calls next() at once.
  user_wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ready;
}

StagedQueue::Work StagedQueue::next_work(const std::function<bool()>& buffer_free) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stop_ || request_ || (active_ && queue_.size() < capacity_ && buffer_free()); });
  Work w;
  if (stop_) return w;
  if (request_) {
    w.kind = Work::start_epoch;
    w.epoch = request_->epoch;
    w.start_batch = request_->start_batch;
    w.skip = request_->skip;
    request_.reset();
    w.generation = generation_;
    active_ = true;  // from here on, pop() waits for this epoch's batches
    return w;
  }
  w.kind = Work::stage;
  w.generation = generation_;
  staging_ = true;
  return w;
}

void StagedQueue::started(std::uint64_t generation, const std::exception_ptr& error) {
  {
    std::lock_guard lock(mu_);
    if (error) queue_.push_back({generation, std::nullopt, error, false});
    if (generation == generation_) active_ = !error;
  }
  cv_.notify_all();
}

void StagedQueue::push(Item item, std::deque<Item>& abandoned) {
  {
    std::lock_guard lock(mu_);
    if (item.end && item.generation == generation_) active_ = false;
    if (item.generation == generation_) {
      staging_ = false;
      queue_.push_back(std::move(item));
    } else {
      abandoned.push_back(std::move(item));
    }
  }
  cv_.notify_all();
}

void StagedQueue::abandoned_released() {
  {
    std::lock_guard lock(mu_);
    staging_ = false;
  }
  cv_.notify_all();
}

void StagedQueue::fail(const std::exception_ptr& error) {
  {
    std::lock_guard lock(mu_);
    failed_ = error;
  }
  cv_.notify_all();
}

void StagedQueue::notify() {
  { std::lock_guard lock(mu_); }  // a waiter between its check and its wait sees the change
  cv_.notify_all();
}

void StagedQueue::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

double StagedQueue::user_wait_seconds() const {
  std::lock_guard lock(mu_);
  return user_wait_seconds_;
}

}  // namespace stoker::detail
