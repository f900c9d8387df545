// Loader: the user's handle. It wires the parts together and hands batches out:
//   options_check -> the dataset's schema (formats/) -> the sampler's epoch plan
//   -> a slot pool sized by ring_sizing -> a SlotSource (worker processes or the calling thread)
//   -> Batches, through the DeviceFeeder's staging thread when the device is staged.
// Data flows one way: workers fill slots, the source hands filled slots over in order, take()
// turns a slot into a Batch (or raises the error a worker stored in it).
#include "stoker/loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <ostream>
#include <thread>

#include "formats/open_reader.h"
#include "loader/base/posix_error.h"
#include "loader/device/device_feeder.h"
#include "loader/options_check.h"
#include "loader/pipeline/pipeline.h"
#include "loader/plan/epoch_plan.h"
#include "loader/plan/launcher_env.h"
#include "loader/plan/quasi_random.h"
#include "loader/plan/sampler.h"
#include "loader/shm/ring_sizing.h"
#include "loader/shm/shm_budget.h"
#include "loader/shm/slot_pool.h"
#include "loader/source/inline_source.h"
#include "loader/source/worker_source.h"
#include "loader/workers/batch_filler.h"
#include "loader/workers/dataset_spec.h"

namespace stoker {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

class LoaderImpl final : public HostSource {
 public:
  explicit LoaderImpl(Options options);
  ~LoaderImpl() override;

  // The user's thread.
  std::uint64_t start_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip = 0);
  std::uint64_t resume(const LoaderState& state);
  std::optional<Batch> next(std::uint64_t generation);
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
  void warn(const std::string& message) const;
  // The loaders on this node that share its shared memory, from the launcher's variables.
  std::uint32_t local_ranks() const;
  // The Batch for a filled slot, or the error its worker stored there.
  Batch take(std::uint32_t slot);

  Options opt_;
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

LoaderImpl::LoaderImpl(Options options)
    : opt_((check_options(options), std::move(options))), sampler_(0, 1, Order::sequential, 0, {}, false) {
  const Order order = opt_.shuffle && opt_.order == Order::sequential ? Order::random : opt_.order;
  formats::ReaderOptions reader_options;
  reader_options.format = opt_.format;
  reader_options.fields = opt_.fields;
  reader_options.group = opt_.group;
  reader_options.sequential = order == Order::sequential;
  // kAuto: fork as many workers as there are cores and reserve the deepest ring the tuner may use;
  // the tuner then activates what helps.
  const bool auto_workers = opt_.num_workers == kAuto, auto_prefetch = opt_.prefetch == kAuto;
  const std::uint32_t cores = std::clamp<std::uint32_t>(std::thread::hardware_concurrency(), 1, 16);
  const auto num_workers = auto_workers ? cores : static_cast<std::uint32_t>(opt_.num_workers);
  const auto prefetch = auto_prefetch ? kAutoMaxPrefetch : static_cast<std::uint32_t>(opt_.prefetch);
  // Metadata is read here, and every handle closed again before any fork.
  auto reader = formats::open_reader(opt_.source, reader_options);
  const Schema source_schema = reader->schema();
  SamplePipelines pipelines(opt_.pipeline, source_schema, opt_.seed);
  schema_ = pipelines.output();
  source_description_ = reader->describe_layout();
  if (const std::string pipeline = pipelines.describe(); !pipeline.empty()) {
    source_description_ += fmt::format("{}pipeline {}", source_description_.empty() ? "" : "; ", pipeline);
  }
  std::vector<std::uint64_t> sample_bound(schema_.fields.size(), 0);
  for (std::size_t f = 0; f < schema_.fields.size(); ++f) {
    if (schema_.fields[f].is_bytes()) sample_bound[f] = reader->sample_bound(f).bytes;
  }
  if (opt_.device.staged() && schema_.has_bytes_fields()) {
    std::vector<std::string> names;
    for (const auto& f : schema_.fields) {
      if (f.is_bytes()) names.push_back(f.name);
    }
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: field(s) {} are variable-length bytes, which stoker delivers on the CPU only: decode "
                            "them in the workers with a pipeline (Options::pipeline) or use Device::cpu()",
                            opt_.source, fmt::join(names, ", ")));
  }
  dataset_ = std::make_shared<const DatasetSpec>(
      DatasetSpec{opt_.source, reader_options, source_schema, opt_.pipeline, opt_.seed});
  sampler_ = Sampler(schema_.num_samples, opt_.batch_size, order, opt_.seed, opt_.shard, opt_.drop_last,
                     reader->locality_rows());
  if (sampler_.batches_per_epoch() == 0) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: no batch per epoch: {} samples, batch_size {}, drop_last, {} shard(s)", opt_.source,
                            schema_.num_samples, opt_.batch_size, opt_.shard.world_size));
  }
  SegmentLayout layout(schema_, opt_.batch_size, num_workers, sample_bound);
  if (num_workers == 0) {
    const auto depth = static_cast<std::uint32_t>(opt_.prefetch);
    slots_ = std::make_shared<SlotPool>(ShmSegment::create_private(layout.segment_bytes(depth)), layout, depth);
    source_ = std::make_unique<InlineSource>(
        slots_, BatchFiller(LazyReader(std::move(reader), opt_.source), std::move(pipelines)));
  } else {
    reader.reset();
    const RingRequest request{num_workers, prefetch, opt_.shm_fraction};
    ReservedRing ring = reserve_ring(
        layout, request, compute_shm_budget(opt_.shm_fraction, opt_.shm_budget, local_ranks()), opt_.shm_backing);
    for (const auto& w : ring.warnings) warn(w);
    shm_backing_ = ring.backing;
    slots_ = std::make_shared<SlotPool>(std::move(ring.segment), layout, ring.depth);
    auto workers = std::make_unique<WorkerSource>(
        slots_, ring.depth, num_workers, dataset_, opt_.timeout,
        WorkerSource::RespawnPolicy{opt_.max_respawns, [this](const std::string& w) { warn(w); }});
    workers_ = workers.get();
    if (order == Order::quasi_random) {
      // A window of the global order is spread over the ranks: this rank's batches of one window.
      const std::uint64_t window = sampler_.group() * kQuasiRandomWindowGroups / opt_.shard.world_size;
      workers_->set_affinity_span(std::max<std::uint64_t>(1, window / opt_.batch_size));
    }
    if (auto_workers || auto_prefetch) {
      AutoTuner::Limits limits;
      limits.max_workers = num_workers;
      limits.max_depth = ring.depth;
      limits.tune_workers = auto_workers;
      limits.tune_prefetch = auto_prefetch;
      limits.start_workers = auto_workers ? 1 : num_workers;
      limits.start_prefetch = auto_prefetch ? 2 : prefetch;
      workers_->set_auto_tuner(std::make_unique<AutoTuner>(limits));
    }
    source_ = std::move(workers);
  }
  plan_.batch_size = opt_.batch_size;
  stats_.workers = num_workers;
  stats_.depth = slots_->num_slots();
  stats_.shm_bytes = slots_->segment().shared() ? slots_->segment().size() : 0;
  stats_.shm_backing = shm_backing_;
  // Threads (ours, and the CUDA driver's) start only now, after the fork server.
  if (opt_.device.staged()) {
    try {
      feeder_ = std::make_unique<DeviceFeeder>(opt_, schema_, *this);
    } catch (...) {
      if (workers_) workers_->stop(opt_.shutdown_grace);  // no destructor runs for a throwing constructor
      throw;
    }
  }
}

LoaderImpl::~LoaderImpl() {
  feeder_.reset();  // its thread draws from the workers
  if (workers_) workers_->stop(opt_.shutdown_grace);
}

void LoaderImpl::warn(const std::string& message) const {
  if (opt_.on_warning) {
    opt_.on_warning(message);
  } else {
    std::cerr << "stoker: warning: " << message << std::endl;
  }
}

std::uint32_t LoaderImpl::local_ranks() const {
  std::string warning;
  const std::uint32_t n = local_ranks_for_budget([](const char* name) { return std::getenv(name); }, warning);
  if (!warning.empty()) warn(warning);
  return n;
}

std::uint64_t LoaderImpl::start_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip) {
  const std::uint64_t batches = sampler_.batches_per_epoch(skip);
  if (start_batch > batches) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("stoker: start_batch {} is past the end of the epoch ({} batches)", start_batch, batches));
  }
  const std::uint64_t generation =
      feeder_ ? feeder_->start_epoch(epoch, start_batch, skip) : start_host_epoch(epoch, start_batch, skip);
  progress_ = Progress{epoch, skip, start_batch, batches, false};
  user_generation_ = generation;
  return generation;
}

std::optional<Batch> LoaderImpl::next(std::uint64_t generation) {
  std::optional<Batch> b = feeder_ ? feeder_->next(generation) : next_host(generation);
  if (generation == user_generation_) {
    if (b) {
      progress_.next_batch = b->index() + 1;
    } else {
      progress_.ended = true;
    }
  }
  return b;
}

LoaderState LoaderImpl::state() const {
  LoaderState s;
  s.epoch = progress_.epoch;
  s.consumed = sampler_.consumed_after(progress_.skip, progress_.next_batch);
  s.epoch_finished = user_generation_ != 0 && (progress_.ended || progress_.next_batch == progress_.num_batches);
  s.seed = opt_.seed;
  s.order = sampler_.order_description();
  s.num_samples = schema_.num_samples;
  s.fields = schema_.describe_fields();
  return s;
}

std::uint64_t LoaderImpl::resume(const LoaderState& state) {
  LoaderState here = this->state();
  std::vector<std::string> differ;
  if (state.num_samples != here.num_samples) {
    differ.push_back(fmt::format("num_samples {} in the state, {} here", state.num_samples, here.num_samples));
  }
  if (state.fields != here.fields) {
    differ.push_back(fmt::format("fields '{}' in the state, '{}' here", state.fields, here.fields));
  }
  if (state.order != here.order) {
    differ.push_back(fmt::format("order {} in the state, {} here", state.order, here.order));
  }
  if (state.order != "sequential" && state.seed != here.seed) {
    differ.push_back(fmt::format("seed {} in the state, {} here", state.seed, here.seed));
  }
  if (!differ.empty()) {
    throw Error(ErrorCode::state_mismatch,
                fmt::format("stoker: the loader state is not for this loader ({}): it would resume another order",
                            fmt::join(differ, "; ")));
  }
  if (state.epoch_finished || state.consumed >= state.num_samples) {
    throw Error(ErrorCode::state_mismatch,
                fmt::format("stoker: the loader state's epoch {} is finished (all its batches were delivered): start "
                            "epoch {} instead of resuming",
                            state.epoch, state.epoch + 1));
  }
  return start_epoch(state.epoch, 0, state.consumed);
}

std::uint64_t LoaderImpl::start_host_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip) {
  source_->abandon();  // reads the previous plan_: before it changes
  plan_.epoch = epoch;
  plan_.order = sampler_.epoch_order(epoch, skip);
  plan_.num_batches = sampler_.batches_per_epoch(skip);
  source_->start(plan_, start_batch);
  handed_out_ = start_batch;
  return ++generation_;
}

Batch LoaderImpl::take(std::uint32_t s) {
  const SegmentView& v = slots_->view();
  const SlotHeader& h = v.slot_header(s);
  OutsideBytes outside;
  if (h.status == static_cast<std::uint32_t>(SlotStatus::too_large)) {
    // A bytes field outgrew its region: read the batch here, into memory of this process.
    try {
      if (!overflow_filler_) {
        overflow_filler_ = std::make_unique<BatchFiller>(*dataset_);
      }
      if (!warned_overflow_) {
        warned_overflow_ = true;
        std::vector<std::string> regions;
        for (std::size_t f = 0; f < schema_.fields.size(); ++f) {
          if (schema_.fields[f].is_bytes()) {
            regions.push_back(fmt::format("'{}' {}", schema_.fields[f].name, format_bytes(v.data_capacity(f))));
          }
        }
        warn(
            fmt::format("batch {} of epoch {} needs {} for a bytes field, more than its region in shared memory holds "
                        "({}, sized from a few samples): such batches are read by the training process instead, "
                        "which is slower (docs/shm-layout.md)",
                        h.batch_index, h.epoch, format_bytes(h.needed_bytes), fmt::join(regions, ", ")));
      }
      auto read = std::make_shared<std::vector<formats::VarBytes>>();
      overflow_filler_->fill_overflow(v, s, *read);
      for (const formats::VarBytes& field : *read) outside.fields.push_back({field.data(), field.offsets()});
      outside.owner = std::move(read);
    } catch (...) {
      slots_->release(s);
      throw;
    }
    {
      std::lock_guard lock(stats_mu_);
      stats_.overflow_batches += 1;
    }
  } else if (h.status != static_cast<std::uint32_t>(SlotStatus::ok)) {
    Error error = v.slot_error_of(s);
    slots_->release(s);
    throw error;
  }
  Batch b = slots_->make_batch(s, std::move(outside));
  std::uint64_t bytes = 0;
  for (const auto& f : b.fields()) bytes += f.bytes;
  {
    std::lock_guard lock(stats_mu_);
    stats_.batches += 1;
    stats_.samples += h.num_samples;
    stats_.bytes += bytes;
    stats_.worker_busy_seconds += static_cast<double>(h.busy_ns) * 1e-9;
  }
  return b;
}

std::optional<Batch> LoaderImpl::next_host(std::uint64_t generation) {
  if (generation != generation_) {
    throw Error(ErrorCode::invalid_option,
                "stoker: this epoch was ended by a later call to Loader::epoch(); iterate the newest one");
  }
  if (handed_out_ == plan_.num_batches) return std::nullopt;
  const auto t0 = Clock::now();
  const std::uint32_t s = source_->next_filled();
  ++handed_out_;
  {
    std::lock_guard lock(stats_mu_);
    stats_.wait_seconds += seconds_since(t0);
  }
  return take(s);
}

Stats LoaderImpl::stats() const {
  Stats s;
  {
    std::lock_guard lock(stats_mu_);
    s = stats_;
  }
  if (feeder_) feeder_->add_stats(s);
  if (workers_) s.worker_cpu_seconds = workers_->worker_cpu_seconds();
  if (workers_) s.respawns = workers_->respawns();
  if (const AutoTuner* t = workers_ ? workers_->auto_tuner() : nullptr) {
    s.workers = t->workers();
    s.depth = t->depth();
    s.auto_tuning = t->describe();
  }
  return s;
}

}  // namespace detail

Loader::Loader(Options options) : impl_(std::make_unique<detail::LoaderImpl>(std::move(options))) {}
Loader::~Loader() = default;

Epoch Loader::epoch(std::uint64_t epoch, std::uint64_t start_batch) {
  return Epoch(impl_.get(), impl_->start_epoch(epoch, start_batch));
}

Epoch Loader::epoch(const LoaderState& state) { return Epoch(impl_.get(), impl_->resume(state)); }

LoaderState Loader::state() const { return impl_->state(); }

const Schema& Loader::schema() const { return impl_->schema(); }
std::string Loader::describe_source() const { return impl_->source_description(); }
const Options& Loader::options() const { return impl_->options(); }
std::uint64_t Loader::batches_per_epoch() const { return impl_->sampler().batches_per_epoch(); }
std::uint64_t Loader::samples_per_epoch() const { return impl_->sampler().samples_per_epoch(); }
Stats Loader::stats() const { return impl_->stats(); }
std::vector<int> Loader::worker_pids() const { return impl_->worker_pids(); }

std::optional<Batch> Epoch::next() { return impl_->next(generation_); }

Epoch::iterator::iterator(Epoch* epoch) : epoch_(epoch) { current_ = epoch_->next(); }

Epoch::iterator& Epoch::iterator::operator++() {
  current_.reset();  // return the slot before asking for the next batch
  current_ = epoch_->next();
  return *this;
}

std::ostream& operator<<(std::ostream& os, const Stats& s) {
  return os << fmt::format(
             "batches {} samples {} bytes {} wait {:.3f}s worker busy {:.3f}s worker cpu {:.3f}s workers {} depth {} "
             "shm {}",
             s.batches, s.samples, detail::format_bytes(s.bytes), s.wait_seconds, s.worker_busy_seconds,
             s.worker_cpu_seconds, s.workers, s.depth, detail::format_bytes(s.shm_bytes));
}

}  // namespace stoker
