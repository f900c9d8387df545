// TaskTable: which batches of the epoch are in flight, in which slot, on which worker, and which
// have arrived. Pure bookkeeping: no processes, no memory of batches; unit-tested on its own.
//
// Batches are issued in order (next_to_issue) and received in order (next_to_receive), PyTorch's
// send_idx/rcvd_idx protocol. Invariants:
//   first <= received <= issued <= end, and issued - received <= depth;
//   batch t, for received <= t < issued, lives in entry t % depth;
//   outstanding(w) is the number of those entries whose worker is w, unfinished(w) the number of
//   them that have not arrived yet (the work w has left).
// Not synchronised: the consumer thread's.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace stoker::detail {

class TaskTable {
 public:
  struct Task {
    std::uint32_t slot = 0;
    std::uint32_t worker = 0;
    bool arrived = false;
  };

  TaskTable(std::uint32_t depth, std::uint32_t num_workers);

  // Starts batches [first, end). REQUIRES: nothing in flight.
  void start(std::uint64_t first, std::uint64_t end);

  std::uint64_t next_to_issue() const noexcept { return issued_; }
  std::uint64_t next_to_receive() const noexcept { return received_; }
  std::uint64_t end() const noexcept { return end_; }
  std::uint64_t in_flight() const noexcept { return issued_ - received_; }
  bool finished() const noexcept { return received_ == end_; }
  // Another batch may be issued: the epoch has one left and the window has room.
  bool can_issue() const noexcept { return issued_ < end_ && in_flight() < active_depth_; }

  // Limits issuing to workers [0, workers) and `depth` batches in flight (the auto-tuner's
  // choice); batches already given to other workers complete as usual.
  void set_active(std::uint32_t workers, std::uint32_t depth) noexcept;

  // The worker with the least work left: the fewest batches given to it that have not arrived.
  // Batches that arrived and wait to be received in order are done work, not load. Counting them
  // starves a worker whenever the window is not a multiple of the workers (its depth less the
  // batches the training loop holds): the worker that is ahead gets nothing while the one behind
  // holds the batch everyone waits for (2 workers and 7 batches in flight lost an eighth of the
  // throughput). Ties go round-robin, from the worker after the one chosen last.
  std::uint32_t least_loaded_worker() const noexcept;
  // Where batch next_to_issue() goes. With an affinity span S > 0, batches come in runs of S that
  // share their data (a quasi-random window's chunks): run k prefers worker k % workers, so that
  // one worker inflates its chunks, while that worker has no more than its share of the window in
  // flight; otherwise, and without a span, the least-loaded worker.
  std::uint32_t worker_for_next() const noexcept;
  void set_affinity_span(std::uint64_t batches) noexcept { affinity_span_ = batches; }
  // Records batch next_to_issue() as given to `worker` in `slot`; returns its batch index.
  // REQUIRES: can_issue().
  std::uint64_t issue(std::uint32_t slot, std::uint32_t worker);

  // Marks an in-flight batch as arrived; false when `batch` is not in flight (a stale report).
  bool mark_arrived(std::uint64_t batch) noexcept;
  // REQUIRES: next_to_receive() <= batch < next_to_issue().
  const Task& at(std::uint64_t batch) const noexcept { return tasks_[batch % depth_]; }

  // Takes batch next_to_receive() out of the table. REQUIRES: in_flight() > 0.
  Task receive();

  // The in-flight batch `worker` was given in `slot` and has not delivered yet, if any.
  std::optional<std::uint64_t> pending_in(std::uint32_t slot, std::uint32_t worker) const noexcept;
  // The first in-flight batch `worker` has not delivered yet, if any (what it died holding).
  std::optional<std::uint64_t> pending_of(std::uint32_t worker) const noexcept;
  std::uint32_t outstanding(std::uint32_t worker) const noexcept { return outstanding_[worker]; }
  std::uint32_t unfinished(std::uint32_t worker) const noexcept { return unfinished_[worker]; }
  // The slots of every in-flight batch `worker` has not delivered, in batch order.
  std::vector<std::uint32_t> pending_slots_of(std::uint32_t worker) const;

 private:
  std::uint32_t depth_;
  std::vector<Task> tasks_;
  std::vector<std::uint32_t> outstanding_;
  std::vector<std::uint32_t> unfinished_;
  std::uint32_t next_turn_ = 0;  // where a tie's round-robin starts: after the last worker chosen
  std::uint64_t received_ = 0, issued_ = 0, end_ = 0;
  std::uint64_t affinity_span_ = 0;
  std::uint32_t active_workers_, active_depth_;
};

}  // namespace stoker::detail
