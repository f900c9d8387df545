// What a worker process does: take slot numbers from its task ring, fill each slot with its batch
// (loader/worker/batch_filler.h), hand it back on its done ring, and signal the consumer; until the
// stop sentinel, or until the trainer is gone (the lifeline hangs up).
#pragma once

#include <cstdint>

#include "loader/shm/segment_layout.h"
#include "loader/worker/dataset_spec.h"

namespace stoker::detail {

struct WorkerContext {
  // The ring: checked against `layout` before the worker writes into it.
  const SegmentLayout* layout = nullptr;
  std::byte* segment = nullptr;
  std::size_t segment_bytes = 0;
  std::uint32_t worker = 0;
  int task_event = -1;                   // eventfd: tasks were pushed
  int done_event = -1;                   // eventfd: shared by all workers, signals the consumer
  int lifeline = -1;                     // hangs up when the trainer process ends
  const DatasetSpec* dataset = nullptr;  // lives as long as the process
};

// The worker's loop; returns on the stop sentinel or when the trainer is gone. A worker given a
// ring its layout does not describe says why on stderr and exits with ChildExit::ring_refused.
void run_worker(const WorkerContext& ctx);

}  // namespace stoker::detail
