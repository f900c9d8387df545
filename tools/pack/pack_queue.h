// stoker-pack's files read and prepared (tools/pack/pack_image.h) by several threads, and handed out
// in plan order: at most 2 x threads + 2 x kWakeEvery files are held at once (read, prepared or
// waiting to be stored), so memory is bounded by that many of the largest file, whatever the plan's
// size.
//
// Files are small (tens of microseconds each), so a wake-up per file would cost as much as the
// file: the consumer sleeps until kWakeEvery files in a row are ready (or the plan's end), and the
// threads that wait for room are woken once every kWakeEvery files given back. A file ready waits
// at most kHoldAtMost for the ones after it, which may be slow to come or never come.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tools/pack/pack_image.h"
#include "tools/pack/pack_plan.h"

namespace stoker::tools {

class PrepareQueue {
 public:
  static constexpr std::uint64_t kWakeEvery = 8;
  static constexpr std::chrono::milliseconds kHoldAtMost{2};

  // Prepares items [first, plan.items.size()) with `threads` threads.
  PrepareQueue(const PackPlan& plan, const ImageRules& rules, unsigned threads, std::uint64_t first);
  // Stops the threads (a file being prepared is finished first) and joins them.
  ~PrepareQueue();
  PrepareQueue(const PrepareQueue&) = delete;
  PrepareQueue& operator=(const PrepareQueue&) = delete;

  struct Prepared {
    std::span<const std::byte> bytes;  // what is stored; valid until release()
    std::string error;                 // or why the file cannot be: names it
    bool reencoded = false;
  };
  // Waits for item `item`, the one after the last released (the first: `first`).
  Prepared wait(std::uint64_t item);
  // Gives its memory back for a later item.
  void release(std::uint64_t item);

 private:
  void stop_threads() noexcept;  // joins every thread started
  struct Slot {
    std::uint64_t item = UINT64_MAX;
    std::vector<std::byte> bytes;
    std::string error;
    bool ready = false, reencoded = false;
  };
  Slot& slot(std::uint64_t item) { return slots_[item % slots_.size()]; }
  bool ready(std::uint64_t item) { return slot(item).ready && slot(item).item == item; }
  // Whether the consumer waiting for [wait_from_, wait_to_) may go on. REQUIRES mutex_ held.
  bool wanted_ready();
  void run();

  const PackPlan& plan_;
  const ImageRules rules_;
  std::vector<Slot> slots_;
  std::mutex mutex_;
  // Two conditions, each with its own waiters: room for more (the threads) and items ready (the
  // one consumer).
  std::condition_variable room_, filled_;
  std::uint64_t next_claim_, released_;                 // guarded by mutex_
  std::uint64_t wait_from_ = UINT64_MAX, wait_to_ = 0;  // the consumer's wait; guarded by mutex_
  bool stop_ = false;                                   // guarded by mutex_
  std::vector<std::thread> threads_;
};

}  // namespace stoker::tools
