// SlotSource: where a loader's filled slots come from, in batch order: worker processes
// (loader/producers/worker_source.h) or the calling thread (loader/producers/inline_source.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "loader/plan/epoch_plan.h"
#include "loader/producers/batch_gate.h"
#include "stoker/stats.h"

namespace stoker::detail {

class SlotSource {
 public:
  virtual ~SlotSource() = default;
  // Waits for and frees whatever the current epoch still has in flight; its plan is still intact.
  virtual void abandon() {}
  // Starts `plan` at batch `first`. REQUIRES: abandon() since the last start(). `plan` stays alive
  // and unchanged until the next abandon().
  virtual void start(const EpochPlan& plan, std::uint64_t first) = 0;
  // The slot holding the next batch, filled (possibly with an error in its header). REQUIRES: the
  // epoch has a next batch. Throws stoker::Error when it cannot be had: every slot is held by live
  // batches, a worker died or is stuck, or interrupt() was called.
  virtual std::uint32_t next_filled() = 0;
  // Waits until next_filled() would not wait (its batch is filled, or it would throw), or until
  // `until`: whether it would not. A source that fills in the calling thread never waits.
  virtual bool wait_filled(std::chrono::steady_clock::time_point until) {
    (void)until;
    return true;
  }
  // Makes a next_filled() blocked in another thread throw (any thread; for shutdown).
  virtual void interrupt() noexcept {}

  // Ends the processes that fill slots, if any, waiting `grace` for them (idempotent).
  virtual void stop(std::chrono::milliseconds grace) noexcept { (void)grace; }
  // In a fork of the owner: lets go of them without telling them anything.
  virtual void disown() noexcept {}
  // Their process ids (none when slots are filled in the calling thread).
  virtual std::vector<int> pids() const { return {}; }
  // Adds its counters to `s`: the workers' CPU time, respawns, the consumer's wakes and, when it
  // chooses the workers and depth itself, its choice (workers, depth, auto_tuning).
  virtual void add_stats(Stats& s) const { (void)s; }

  // From now on, a batch is read only once `gate` says it may be (null: at once). `gate` outlives
  // this source.
  void set_gate(BatchGate* gate) noexcept { gate_ = gate; }

 protected:
  BatchGate* gate_ = nullptr;
};

}  // namespace stoker::detail
