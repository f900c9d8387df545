// LoaderImpl: the Loader's parts wired together. It carries out the LoaderDesign
// (loader/loader_design.h) and hands batches out:
//   the dataset's schema (formats) -> the sampler's epoch plan (loader/plan)
//   -> a slot pool sized by ring sizing (loader/shm) -> a SlotSource (loader/source: worker
//   processes or the calling thread) -> Batches, through the DeviceFeeder's staging thread when the
//   device is staged (loader/device).
// Data flows one way: workers fill slots, the source hands filled slots over in order, take()
// turns a slot into a Batch (or raises the error a worker stored in it).
//
// A LoaderImpl belongs to the process that built it: in a process forked from it (a user's fork(),
// a multiprocessing worker) it refuses to be used, and destroying it there touches nothing the
// owner's workers, ring or device share. Thread-safety: as stoker::Loader's.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "loader/device/device_feeder.h"
#include "loader/loader_design.h"
#include "loader/plan/epoch_plan.h"
#include "loader/plan/sampler.h"
#include "loader/shm/slot_pool.h"
#include "loader/source/slot_source.h"
#include "loader/source/worker_source.h"
#include "loader/workers/batch_filler.h"
#include "loader/workers/dataset_spec.h"
#include "stoker/loader.h"

namespace stoker::detail {

class LoaderImpl final : public HostSource {
 public:
  explicit LoaderImpl(Options options);
  ~LoaderImpl() override;
  LoaderImpl(const LoaderImpl&) = delete;
  LoaderImpl& operator=(const LoaderImpl&) = delete;

  // The user's thread.
  std::uint64_t start_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip = 0);
  std::uint64_t resume(const LoaderState& state);
  std::optional<Batch> next(std::uint64_t generation);
  // Whether next(generation) would not wait, waiting up to `within` for that (Epoch::wait).
  bool wait_ready(std::uint64_t generation, std::chrono::milliseconds within);
  LoaderState state() const;

  // HostSource: the shared-memory pipeline (the staging thread's, when there is one).
  std::uint64_t start_host_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip) override;
  std::optional<Batch> next_host(std::uint64_t generation) override;
  std::byte* slot_memory() const override { return slots_->segment().data(); }
  std::size_t slot_memory_bytes() const override { return slots_->segment().size(); }
  std::uint32_t depth() const override { return slots_->num_slots(); }
  void interrupt() noexcept override { source_->interrupt(); }

  const Options& options() const { return opt_; }
  const Schema& schema() const { return schema_; }
  const std::string& source_description() const { return source_description_; }
  const Sampler& sampler() const { return sampler_; }
  Stats stats() const;
  std::vector<int> worker_pids() const { return workers_ ? workers_->pids() : std::vector<int>{}; }

 private:
  // The dataset as the loader's process scanned it: the reader (kept only for a loader without
  // workers), its pipelines, and each bytes field's bound for the slots.
  struct Scanned {
    std::unique_ptr<formats::Reader> reader;
    SamplePipelines pipelines;
    std::vector<std::uint64_t> sample_bound;
  };
  Scanned scan_dataset();
  void start_inline(const SegmentLayout& layout, Scanned scanned);
  void start_workers(const SegmentLayout& layout);
  // Throws stoker::Error (ErrorCode::wrong_process) in a process other than the one that built it.
  void check_process() const;
  void warn(const std::string& message) const;
  // The loaders on this node that share its shared memory, from the launcher's variables.
  std::uint32_t local_ranks() const;
  // The Batch for a filled slot, or the error its worker stored there.
  Batch take(std::uint32_t slot);
  // A batch too large for its slot: its bytes fields read here, into memory of this process.
  OutsideBytes read_outside(std::uint32_t slot);

  Options opt_;
  LoaderDesign design_;
  std::string shards_identity_;  // LoaderState::shards
  pid_t owner_pid_;
  Schema schema_;  // delivered: the reader's, with the pipelines' outputs
  std::string source_description_;
  // What workers open, and what the consumer opens for a too-large batch.
  std::shared_ptr<const DatasetSpec> dataset_;
  std::unique_ptr<BatchFiller> overflow_filler_;  // the consumer's, made on the first too-large batch
  bool warned_overflow_ = false;
  Sampler sampler_;
  std::shared_ptr<SlotPool> slots_;
  ShmBacking shm_backing_ = ShmBacking::automatic;  // the ring's, once reserved (automatic: no ring in shm)
  std::unique_ptr<SlotSource> source_;
  WorkerSource* workers_ = nullptr;  // source_, when it is worker processes

  std::uint64_t generation_ = 0;  // of the newest epoch; older Epoch objects are refused
  // What the user has received of the newest epoch (user's thread): for state().
  struct Progress {
    std::uint64_t epoch = 0, skip = 0, next_batch = 0, num_batches = 0;
    bool ended = false;  // next() returned the end
  } progress_;
  std::uint64_t user_generation_ = 0;
  EpochPlan plan_;                // the host pipeline's epoch (the staging thread's, when there is one)
  std::uint64_t handed_out_ = 0;  // batches of plan_ taken from the source
  mutable std::mutex stats_mu_;   // stats_ is written by the staging thread, read by the user's
  Stats stats_;
  std::unique_ptr<DeviceFeeder> feeder_;  // staged devices; started last, stopped first
};

}  // namespace stoker::detail
