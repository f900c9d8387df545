// StagedQueue: the hand-over between the staging thread and the training loop.
//
// The user's thread asks for an epoch (request) and takes staged batches in order (pop); the
// staging thread waits for work (next_work), reports the epoch started, and queues each staged
// batch, an error, or the end of the epoch (push). Every request makes a new generation; items of
// older generations are never handed out. At most `capacity` items wait in the queue
// (prefetch_to_device).
//
// Thread-safe: one mutex guards everything here. Lock order: this queue, then the device buffer
// pool (the predicates passed in take the pool's lock); the pool never calls in here with its lock
// held.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>

#include "stoker/batch.h"

namespace stoker::detail {

class StagedQueue {
 public:
  struct Item {
    std::uint64_t generation = 0;
    std::optional<Batch> batch;
    std::exception_ptr error;
    bool end = false;  // the epoch is over
  };

  explicit StagedQueue(std::size_t capacity) : capacity_(capacity) {}

  // The consumer's (one thread at a time). Starts a new generation for (epoch, start_batch, skip) and moves the queued
  // items of the old one into `stale`, for the caller to release outside the lock.
  std::uint64_t request(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip, std::deque<Item>& stale);

  // The consumer's (one thread at a time). The next item of `generation`, or nullopt when its epoch is over. Items of
  // other generations go to `stale`. `all_held()` is asked while nothing is queued and the staging
  // thread is not staging: when every device buffer is then held by live batches nothing can be
  // staged, and pop throws instead of waiting forever. Throws when `generation` is not the newest.
  std::optional<Item> pop(std::uint64_t generation, std::size_t num_buffers, const std::function<bool()>& all_held,
                          std::deque<Item>& stale);

  // The consumer's (one thread at a time). Waits until pop() would not wait (an item of `generation` is queued, the
  // epoch is over, or pop would throw), or until `until`: whether it would not.
  bool wait_ready(std::uint64_t generation, const std::function<bool()>& all_held,
                  std::chrono::steady_clock::time_point until);

  // Staging thread.
  struct Work {
    enum Kind { stop, start_epoch, stage } kind = stop;
    std::uint64_t epoch = 0, start_batch = 0, skip = 0, generation = 0;
  };
  // Blocks until stopped, an epoch is requested, or a batch can be staged: an epoch is active, the
  // queue has room and `buffer_free()`. For `stage`, the thread counts as staging until push().
  Work next_work(const std::function<bool()>& buffer_free);
  // The epoch of `generation` started (or failed to: `error`).
  void started(std::uint64_t generation, const std::exception_ptr& error);
  // Queues what staging produced; the thread no longer counts as staging. An item of an abandoned
  // generation goes to `abandoned` instead, to be released outside the lock, and the thread counts
  // as staging until abandoned_released(): its buffer is held until then.
  void push(Item item, std::deque<Item>& abandoned);
  void abandoned_released();

  // The staging thread cannot go on: every pop(), of any generation, throws `error` from now on.
  void fail(const std::exception_ptr& error);

  // Any thread: wakes waiters to look again (a device buffer became free).
  void notify();
  void stop();
  // Seconds the user's thread spent waiting in pop().
  double user_wait_seconds() const;

 private:
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  struct Request {
    std::uint64_t epoch, start_batch, skip;
  };
  std::optional<Request> request_;
  std::uint64_t generation_ = 0;  // of the newest request
  bool active_ = false;           // the staging thread has an epoch to stage
  bool staging_ = false;          // the staging thread is filling a buffer
  bool stop_ = false;
  std::exception_ptr failed_;
  double user_wait_seconds_ = 0;
};

}  // namespace stoker::detail
