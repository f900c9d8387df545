// FairMutex: a mutex handed over in the order it was asked for (a ticket lock). A thread that waits
// in slices, unlocking and locking again between them, cannot keep a thread that asked in between
// waiting: with std::mutex the thread that unlocks usually takes it back first. A Lockable, for
// std::lock_guard and std::unique_lock.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace stoker::detail {

class FairMutex {
 public:
  void lock() {
    std::unique_lock lock(mutex_);
    const std::uint64_t ticket = next_ticket_++;
    turn_.wait(lock, [&] { return serving_ == ticket; });
  }
  void unlock() {
    {
      std::lock_guard lock(mutex_);
      ++serving_;
    }
    turn_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable turn_;
  std::uint64_t next_ticket_ = 0;  // guarded by mutex_
  std::uint64_t serving_ = 0;      // guarded by mutex_
};

}  // namespace stoker::detail
