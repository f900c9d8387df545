// A filled slot turned into what the consumer hands out: its batch, read again outside the ring
// when a bytes field did not fit its region (docs/shm-layout.md), or the error its worker wrote;
// and what the slot's header says of how it was filled. The consumer reads no slot header itself.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/shm/segment_header.h"
#include "loader/shm/slot_pool.h"
#include "loader/worker/batch_filler.h"
#include "loader/worker/dataset_spec.h"
#include "stoker/batch.h"

namespace stoker::detail {

// How a batch was filled, from its slot's header.
struct FillFacts {
  std::uint32_t worker = 0;
  std::uint64_t epoch = 0, batch_index = 0;
  std::uint32_t num_samples = 0;
  std::uint64_t busy_ns = 0;                          // the worker's time on it
  std::uint32_t shard_opens = 0;                      // shard files the worker opened since its last batch
  std::uint64_t started_ns = 0;                       // when the worker began it (CLOCK_MONOTONIC)
  std::array<std::uint64_t, kStageSlots> stage_ns{};  // per stage (loader/worker/stage_times.h)
  bool read_outside = false;                          // read again outside the ring
};

struct FilledBatch {
  Batch batch;
  FillFacts facts;
  std::string skip_notes;  // the skipped samples' notes (Options::on_decode_error = skip)
};

class FilledBatches {
 public:
  // Where a batch too large for its slot is read again: in a child process when there are workers
  // (the file is not parsed in this process), else here; bounded by the dataset's size on disk
  // (`file_bytes`, 0: unknown) over the ranks of this node.
  struct Outside {
    std::string source;
    std::uint64_t file_bytes = 0;
    std::uint32_t local_ranks = 1;
    bool in_child = false;
    std::chrono::milliseconds timeout{0};
  };
  FilledBatches(std::shared_ptr<SlotPool> slots, std::shared_ptr<const DatasetSpec> dataset, std::size_t batch_size,
                Outside outside);

  // The batch of filled slot `s`. Throws the error its worker wrote, or the one of reading it
  // outside the ring, the slot released. `warnings` receives, once, that a batch is read outside.
  FilledBatch take(std::uint32_t s, std::vector<std::string>& warnings);

 private:
  OutsideBytes read_outside(std::uint32_t s, std::vector<std::string>& warnings);

  std::shared_ptr<SlotPool> slots_;
  std::shared_ptr<const DatasetSpec> dataset_;
  std::size_t batch_size_;
  Outside outside_;
  std::unique_ptr<BatchFiller> filler_;  // made on the first batch too large for its slot
  bool warned_ = false;
};

}  // namespace stoker::detail
