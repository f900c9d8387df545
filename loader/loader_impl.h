// LoaderImpl: the Loader's parts wired together. It carries out the LoaderDesign
// (loader/loader_design.h) and hands batches out:
//   the dataset's schema (formats) -> the sampler's epoch plan (loader/plan)
//   -> a slot pool sized by ring sizing (loader/shm) -> a SlotSource (loader/producers: worker
//   processes or the calling thread) -> Batches, through the DeviceFeeder's staging thread when the
//   device is staged (loader/device).
// Data flows one way: workers fill slots, the source hands filled slots over in order, take()
// turns a slot into a Batch (or raises the error a worker stored in it).
//
// A LoaderImpl belongs to the process that built it: in a process forked from it (a user's fork(),
// a multiprocessing worker) it refuses to be used, and destroying it there touches nothing the
// owner's workers, ring or device share.
//
// Thread-safety (stoker::Loader's contract): any thread may call anything. Three locks, always
// taken in this order:
//   consumer_mu_  the user's calls that start epochs or hand batches out (start_epoch, resume,
//                 next, wait_ready): one at a time, so each batch goes to one caller, in order.
//   host_mu_      the host pipeline (source_, plan_, handed_out_, undelivered_, generation_, the overflow
//                 reader): the consumer's thread, or the staging thread on a staged device; and
//                 stats() and worker_pids(). Held for at most kLockSlice of a wait for workers at
//                 a time, and fair, so that stats() waits at most about that long whoever waits
//                 for a batch; but for the whole of a read done by this process (a loader without
//                 workers reads its batches here) and of a batch read again outside the ring.
//   stats_mu_     stats_, progress_ and user_generation_: held for a copy.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "loader/device/device_feeder.h"
#include "loader/fair_mutex.h"
#include "loader/loader_design.h"
#include "loader/plan/epoch_plan.h"
#include "loader/plan/sampler.h"
#include "loader/producers/filled_batch.h"
#include "loader/producers/slot_source.h"
#include "loader/producers/worker_source.h"
#include "loader/remote_sources.h"
#include "loader/shard_fetcher.h"
#include "loader/shm/slot_pool.h"
#include "loader/skipped_samples.h"
#include "loader/time_report.h"
#include "loader/worker/batch_filler.h"
#include "loader/worker/dataset_spec.h"
#include "remote/http_fetch.h"
#include "stoker/loader.h"

namespace stoker::detail {

class LoaderImpl final : public HostSource {
 public:
  // `keep_going`: as stoker::Loader's (stoker/loader.h).
  explicit LoaderImpl(Options options, const std::function<bool()>& keep_going = {});
  ~LoaderImpl() override;
  LoaderImpl(const LoaderImpl&) = delete;
  LoaderImpl& operator=(const LoaderImpl&) = delete;

  // The user's threads.
  std::uint64_t start_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip = 0);
  std::uint64_t resume(const LoaderState& state);
  std::optional<Batch> next(std::uint64_t generation);
  // Whether next(generation) would not wait, waiting up to `within` for that (Epoch::wait).
  bool wait_ready(std::uint64_t generation, std::chrono::milliseconds within);
  LoaderState state() const;
  // The Loader handle is gone (~Loader): a call still inside next() or wait_ready() in another
  // thread returns within kLockSlice (next() with the error an Epoch of a destroyed Loader gets),
  // and the last of them destroys this. Any thread.
  void detach() noexcept;

  // The longest a wait holds host_mu_ at a time.
  static constexpr std::chrono::milliseconds kLockSlice{100};

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
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const Sampler& sampler() const { return sampler_; }
  const formats::ReaderOptions& reader_options() const { return design_.reader_options; }
  bool remote_shards() const { return remote_.any; }
  Stats stats() const;
  std::vector<int> worker_pids() const;

 private:
  // The dataset as the loader's process scanned it: the reader (kept only for a loader without
  // workers), its pipelines, and each bytes field's bound for the slots.
  struct Scanned {
    std::unique_ptr<formats::Reader> reader;
    SamplePipelines pipelines;
    std::vector<std::uint64_t> sample_bound;
  };
  Scanned scan_dataset(const std::function<bool()>& keep_going);
  void start_inline(const SegmentLayout& layout, Scanned scanned);
  void start_workers(const SegmentLayout& layout);
  // Throws stoker::Error (ErrorCode::wrong_process) in a process other than the one that built it,
  // and (ErrorCode::invalid_option) once the Loader handle is destroyed.
  void check_process() const;
  void check_owner() const;  // the first of those: throws in a process other than the one that built it
  bool wait_host_ready(std::uint64_t generation, std::chrono::steady_clock::time_point until);
  std::uint64_t start_epoch_locked(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip);
  LoaderState state_locked() const;  // REQUIRES: stats_mu_
  void warn(const std::string& message) const;
  // The loaders on this node that share its shared memory, from the launcher's variables.
  std::uint32_t local_ranks(bool warn_if_stray) const;
  // The Batch for a filled slot, or the error its worker stored there (FilledBatches::take); counted
  // in Stats, and the warnings it brings put in `warnings` (given by the caller once it holds the batch).
  Batch take(std::uint32_t slot, std::vector<std::string>& warnings);

  remote::FetchCounters fetches_;  // before opt_: resolving the options fetches remote shards
  // Remote shards: held while this loader reads them whole from the cache; or, for a set larger
  // than the cache, what resolving the options found of it, and what fetches its shards as the
  // epochs need them (destroyed after source_, whose gate it is).
  RemoteShards remote_;
  std::unique_ptr<ShardFetcher> fetcher_;
  std::vector<std::uint64_t> shard_starts_;  // fetcher_'s set: each shard's first sample, and the count last
  std::uint64_t built_downloads_ = 0, built_download_bytes_ = 0;  // fetched before the first batch
  Options opt_;
  // The CPUs this process may use (the verdict's, and auto workers' ceiling): read once (the
  // cgroup's files). Before design_, which it sizes.
  const unsigned usable_cpus_ = usable_cpus();
  LoaderDesign design_;
  std::string shards_identity_;  // LoaderState::shards
  pid_t owner_pid_;
  Schema schema_;  // delivered: the reader's, with the pipelines' outputs
  std::string source_description_;
  std::map<std::string, std::string> metadata_;  // Loader::metadata()
  // What workers open, and what the consumer opens for a too-large batch.
  std::shared_ptr<const DatasetSpec> dataset_;
  std::uint32_t local_ranks_ = 1;  // the loaders on this node that share its shared memory
  std::uint64_t file_bytes_ = 0;   // the dataset's size on disk (0: unknown), which bounds a batch read again
  Sampler sampler_;
  std::shared_ptr<SlotPool> slots_;
  std::optional<ShmBacking> shm_backing_;  // the ring's, once reserved (none: no ring in shared memory)
  std::unique_ptr<SlotSource> source_;
  std::unique_ptr<FilledBatches> filled_;  // what the filled slots of source_ deliver

  std::mutex consumer_mu_;             // see the top of this file
  mutable FairMutex host_mu_;          // see the top of this file
  mutable std::mutex stats_mu_;        // see the top of this file
  std::atomic<bool> detached_{false};  // detach() was called
  std::uint64_t generation_ = 0;       // of the newest epoch; older Epoch objects are refused (host_mu_)
  // What the user has received of the newest epoch: for state() (stats_mu_).
  struct Progress {
    std::uint64_t epoch = 0, skip = 0, next_batch = 0, num_batches = 0;
    bool ended = false;  // next() returned the end
  } progress_;
  std::uint64_t user_generation_ = 0;  // stats_mu_
  EpochPlan plan_;                     // the host pipeline's epoch (the staging thread's, when there is one); host_mu_
  std::uint64_t handed_out_ = 0;       // batches of plan_ taken from the source; host_mu_
  // A batch of plan_ taken whose warning threw (an on_warning callback's exception): the next call
  // delivers it (host_mu_).
  std::optional<Batch> undelivered_;
  Stats stats_;                                      // stats_mu_
  std::unique_ptr<TraceWriter> trace_;               // Options::trace; its own lock
  std::unique_ptr<DeviceTraceTracks> device_trace_;  // its device tracks, for feeder_
  TimeReport times_;                                 // stats_mu_; writes into trace_
  void came_back() {                                 // the consumer asks for a batch: its step ended
    std::lock_guard lock(stats_mu_);
    times_.came_back(std::chrono::steady_clock::now());
  }
  SkippedSamples skipped_;                // stats_mu_
  std::unique_ptr<DeviceFeeder> feeder_;  // staged devices; started last, stopped first
};

}  // namespace stoker::detail
