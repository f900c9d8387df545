// The ring of slot numbers between the consumer and one worker, in shared memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace stoker::detail {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "rings in shared memory need lock-free atomics");

// A single-producer single-consumer ring of slot numbers. write and read are monotonic counters
// on their own cache lines; the producer publishes an item with a release store of write, the
// consumer frees its place with a release store of read. Full when write - read == capacity.
class SlotRing {
 public:
  SlotRing() = default;
  // `counters`: two cache lines (write, read); `items`: capacity words.
  SlotRing(std::byte* counters, std::byte* items, std::uint32_t capacity) noexcept;
  // Constructs the counters in place; once, before any process uses the ring.
  void initialize() noexcept;

  bool push(std::uint32_t value) noexcept;  // producer only
  bool pop(std::uint32_t& value) noexcept;  // consumer only
  // Consumer only: the items pushed but not yet popped are at positions [read_position(),
  // write_position()); item_at() reads one of them without popping it.
  std::uint64_t read_position() const noexcept { return read_->load(std::memory_order_relaxed); }
  std::uint64_t write_position() const noexcept { return write_->load(std::memory_order_acquire); }
  std::uint32_t item_at(std::uint64_t position) const noexcept { return items_[position % capacity_]; }
  // Producer only, and only while no consumer exists (its process died): empties the ring.
  void clear_from_producer() noexcept {
    read_->store(write_->load(std::memory_order_relaxed), std::memory_order_release);
  }

 private:
  std::atomic<std::uint64_t>* write_ = nullptr;
  std::atomic<std::uint64_t>* read_ = nullptr;
  std::uint32_t* items_ = nullptr;
  std::uint32_t capacity_ = 0;
};

}  // namespace stoker::detail
