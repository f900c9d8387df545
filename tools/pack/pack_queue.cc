#include "tools/pack/pack_queue.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <system_error>

#include "stoker/error.h"

namespace stoker::tools {

PrepareQueue::PrepareQueue(const PackPlan& plan, const ImageRules& rules, unsigned threads, std::uint64_t first)
    : plan_(plan),
      rules_(rules),
      // At least 2 x kWakeEvery: the kWakeEvery items the consumer waits for are always claimable
      // although the threads are woken only every kWakeEvery releases.
      slots_(2 * std::size_t{std::max(threads, 1u)} + 2 * kWakeEvery),
      next_claim_(first),
      released_(first) {
  threads_.reserve(std::max(threads, 1u));
  try {
    for (unsigned t = 0; t < std::max(threads, 1u); ++t) threads_.emplace_back([this] { run(); });
  } catch (const std::system_error& e) {
    // No destructor runs for a throwing constructor: the threads started are stopped here.
    stop_threads();
    throw Error(ErrorCode::io, fmt::format("stoker-pack: could not start thread {} of {} (--jobs): {}",
                                           threads_.size() + 1, std::max(threads, 1u), e.what()));
  } catch (...) {
    stop_threads();
    throw;
  }
}

PrepareQueue::~PrepareQueue() { stop_threads(); }

void PrepareQueue::stop_threads() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  room_.notify_all();
  for (auto& t : threads_) t.join();
}

bool PrepareQueue::wanted_ready() {
  for (std::uint64_t i = wait_from_; i < wait_to_; ++i) {
    if (!ready(i)) return false;
  }
  return true;
}

void PrepareQueue::run() {
  ImagePreparer preparer(rules_);
  for (;;) {
    std::uint64_t item;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Item i uses slot i % slots: it may start once item i - slots is released.
      room_.wait(lock,
                 [&] { return stop_ || next_claim_ >= plan_.items.size() || next_claim_ < released_ + slots_.size(); });
      if (stop_ || next_claim_ >= plan_.items.size()) return;
      item = next_claim_++;
    }
    // The slot is this thread's alone until it is marked ready.
    Slot& s = slot(item);
    const PackItem& p = plan_.items[item];
    s.error.clear();
    s.reencoded = false;
    try {
      read_whole_file(p.path, p.where, s.bytes);
      try {
        const std::span<const std::byte> stored = preparer.prepare(s.bytes);
        if (preparer.reencoded()) {
          s.bytes.assign(stored.begin(), stored.end());
          s.reencoded = true;
        }
      } catch (const std::exception& e) {
        s.error = p.where + ": " + e.what();
      }
    } catch (const std::exception& e) {
      s.error = e.what();  // names the file already
    }
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      s.item = item;
      s.ready = true;
      wake = item >= wait_from_ && item < wait_to_ && wanted_ready();
    }
    if (wake) filled_.notify_one();
  }
}

PrepareQueue::Prepared PrepareQueue::wait(std::uint64_t item) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!ready(item)) {
    wait_from_ = item;
    wait_to_ = std::min<std::uint64_t>(item + kWakeEvery, plan_.items.size());
    // The files after `item` are waited for a while only: one of them may not come for long (a
    // FIFO, a stalled network mount), and the ones before it are stored meanwhile.
    if (!filled_.wait_for(lock, kHoldAtMost, [&] { return wanted_ready(); })) {
      wait_to_ = item + 1;
      filled_.wait(lock, [&] { return ready(item); });
    }
    wait_from_ = UINT64_MAX;
    wait_to_ = 0;
  }
  Slot& s = slot(item);
  return {s.bytes, s.error, s.reencoded};
}

void PrepareQueue::release(std::uint64_t item) {
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    slot(item).ready = false;
    released_ = item + 1;
    wake = released_ % kWakeEvery == 0;
  }
  if (wake) room_.notify_all();
}

}  // namespace stoker::tools
