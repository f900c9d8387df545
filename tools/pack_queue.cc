#include "tools/pack_queue.h"

#include <exception>

namespace stoker::tools {

PrepareQueue::PrepareQueue(const PackPlan& plan, const ImageRules& rules, unsigned threads, std::uint64_t first)
    : plan_(plan), rules_(rules), slots_(2 * std::max(threads, 1u)), next_claim_(first), released_(first) {
  for (unsigned t = 0; t < std::max(threads, 1u); ++t) threads_.emplace_back([this] { run(); });
}

PrepareQueue::~PrepareQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_) t.join();
}

void PrepareQueue::run() {
  ImagePreparer preparer(rules_);
  for (;;) {
    std::uint64_t item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Item i uses slot i % slots: it may start once item i - slots is released.
      changed_.wait(
          lock, [&] { return stop_ || next_claim_ >= plan_.items.size() || next_claim_ < released_ + slots_.size(); });
      if (stop_ || next_claim_ >= plan_.items.size()) return;
      item = next_claim_++;
    }
    // The slot is this thread's alone until it is marked ready.
    Slot& slot = slots_[item % slots_.size()];
    const PackItem& p = plan_.items[item];
    slot.error.clear();
    slot.reencoded = false;
    try {
      read_whole_file(p.path, p.where, slot.bytes);
      try {
        const std::span<const std::byte> stored = preparer.prepare(slot.bytes);
        if (preparer.reencoded()) {
          slot.bytes.assign(stored.begin(), stored.end());
          slot.reencoded = true;
        }
      } catch (const std::exception& e) {
        slot.error = p.where + ": " + e.what();
      }
    } catch (const std::exception& e) {
      slot.error = e.what();  // names the file already
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slot.item = item;
      slot.ready = true;
    }
    changed_.notify_all();
  }
}

PrepareQueue::Prepared PrepareQueue::wait(std::uint64_t item) {
  Slot& slot = slots_[item % slots_.size()];
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return slot.ready && slot.item == item; });
  return {slot.bytes, slot.error, slot.reencoded};
}

void PrepareQueue::release(std::uint64_t item) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slots_[item % slots_.size()].ready = false;
    released_ = item + 1;
  }
  changed_.notify_all();
}

}  // namespace stoker::tools
