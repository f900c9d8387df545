// What the consumer and one worker share besides the slots: their two rings, the worker's counters,
// and the fence of the handshakes by which each side knows whether to wake the other.
#pragma once

#include <atomic>
#include <cstdint>

#include "loader/shm/slot_ring.h"

namespace stoker::detail {

// The sequentially consistent fence of the handshakes between processes (awaited_slot, idle): a
// store, this fence, then a load, on each side. ThreadSanitizer, which sees one process only, does
// not model fences (GCC says so, -Wtsan): hidden from it.
inline void shared_memory_fence() noexcept {
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
  std::atomic_thread_fence(std::memory_order_seq_cst);
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
}

// The rings between the consumer and one worker, and that worker's counters.
struct WorkerChannel {
  SlotRing tasks;                                // consumer -> worker
  SlotRing done;                                 // worker -> consumer
  std::atomic<std::uint64_t>* cpu_ns = nullptr;  // the worker's CPU time, updated after each task
  // Bumped by the worker at each step of a batch (taken, read, each sample through its pipeline,
  // done): the consumer tells a stuck worker from a slow one by it (loader/producers/progress_watch.h).
  std::atomic<std::uint64_t>* progress = nullptr;
  // The index of the sample the worker is running a pipeline or transform on, plus one; 0 while it
  // reads a batch or waits. Read by the consumer when a worker dies, to name the sample that killed
  // it. In progress's cache line: both are written by the worker alone.
  std::atomic<std::uint64_t>* sample = nullptr;
  // 1 while the worker sleeps (or is about to) on its task eventfd, 0 while it works: the consumer
  // writes the eventfd after a push only to a worker that sleeps. The worker stores it, then looks
  // at its task ring; the consumer pushes, then loads it: each with a seq_cst fence between, so
  // that the worker sees the task or the consumer sees it sleeps. In progress's cache line.
  std::atomic<std::uint64_t>* idle = nullptr;
};

}  // namespace stoker::detail
