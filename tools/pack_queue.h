// stoker-pack's files read and prepared (tools/pack_image.h) by several threads, and handed out
// in plan order: at most `window` files are held at once (read, prepared or waiting to be stored),
// so memory is bounded by the window times the largest file, whatever the plan's size.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tools/pack_image.h"
#include "tools/pack_plan.h"

namespace stoker::tools {

class PrepareQueue {
 public:
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
  struct Slot {
    std::uint64_t item = UINT64_MAX;
    std::vector<std::byte> bytes;
    std::string error;
    bool ready = false, reencoded = false;
  };
  void run();

  const PackPlan& plan_;
  const ImageRules rules_;
  std::vector<Slot> slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t next_claim_, released_;  // guarded by mutex_
  bool stop_ = false;                    // guarded by mutex_
  std::vector<std::thread> threads_;
};

}  // namespace stoker::tools
