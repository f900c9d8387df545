#include "loader/shm/slot_ring.h"

namespace stoker::detail {
namespace {

constexpr std::size_t kLine = 64;  // the write and read counters are a cache line apart

}  // namespace

SlotRing::SlotRing(std::byte* counters, std::byte* items, std::uint32_t capacity) noexcept
    : write_(reinterpret_cast<std::atomic<std::uint64_t>*>(counters)),
      read_(reinterpret_cast<std::atomic<std::uint64_t>*>(counters + kLine)),
      items_(reinterpret_cast<std::uint32_t*>(items)),
      capacity_(capacity) {}

void SlotRing::initialize() noexcept {
  new (write_) std::atomic<std::uint64_t>(0);
  new (read_) std::atomic<std::uint64_t>(0);
}

bool SlotRing::push(std::uint32_t value) noexcept {
  std::uint64_t w = write_->load(std::memory_order_relaxed);
  if (w - read_->load(std::memory_order_acquire) == capacity_) return false;
  items_[w % capacity_] = value;
  write_->store(w + 1, std::memory_order_release);
  return true;
}

bool SlotRing::pop(std::uint32_t& value) noexcept {
  std::uint64_t r = read_->load(std::memory_order_relaxed);
  if (r == write_->load(std::memory_order_acquire)) return false;
  value = items_[r % capacity_];
  read_->store(r + 1, std::memory_order_release);
  return true;
}

}  // namespace stoker::detail
