#include "loader/loader_impl.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <string_view>
#include <thread>

#include "base/posix_error.h"
#include "formats/open_reader.h"
#include "formats/shard_set.h"
#include "loader/child_reads/probe.h"
#include "loader/children/child_hygiene.h"
#include "loader/delivery.h"
#include "loader/mix_sources.h"
#include "loader/options_check.h"
#include "loader/pipeline/op_library.h"
#include "loader/plan/launcher_env.h"
#include "loader/producers/inline_source.h"
#include "loader/resume_check.h"
#include "loader/shm/ring_sizing.h"
#include "loader/shm/shm_budget.h"
#include "loader/streamed_probe.h"
#include "loader/worker/stage_times.h"

namespace stoker::detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// LoaderState::shards for a shard set: the count, and XXH64 of each shard's file name and sample
// count.
std::string shard_set_identity(const std::string& source, const std::vector<std::uint64_t>& samples) {
  if (!formats::is_shard_set(source)) return "";
  const std::vector<std::string> paths = formats::shard_paths(source);
  std::string canonical;
  for (std::size_t k = 0; k < paths.size(); ++k) {
    // The file name: the last component, a directory's (an LMDB directory) without its trailing '/'.
    std::string_view name = paths[k];
    while (name.size() > 1 && name.back() == '/') name.remove_suffix(1);
    if (const std::size_t slash = name.find_last_of('/'); slash != std::string_view::npos)
      name.remove_prefix(slash + 1);
    canonical += fmt::format("{}|{}\n", name, k < samples.size() ? samples[k] : 0);
  }
  return fmt::format("{} shards {:016x}", paths.size(), XXH64(canonical.data(), canonical.size(), 0));
}

}  // namespace

LoaderImpl::LoaderImpl(Options options, const std::function<bool()>& keep_going)
    : opt_(checked_and_resolved(std::move(options), fetches_, keep_going, remote_)),
      design_(design_loader(opt_, usable_cpus_ != 0 ? usable_cpus_ : std::thread::hardware_concurrency())),
      owner_pid_(::getpid()),
      sampler_(0, 1, Order::sequential, 0, {}, false),
      skipped_(formats::source_name(opt_.source)) {
  if (remote_.streamed) fetcher_ = streamed_fetcher(*remote_.streamed, opt_.source, fetches_);
  if (!opt_.trace.empty()) trace_ = std::make_unique<TraceWriter>(opt_.trace, ::getpid(), design_.num_workers);
  times_.set_trace(trace_.get());
  if (fetcher_) fetcher_->set_trace(trace_.get());
  for (const std::string& w : remote_.warnings) warn(w);
  Scanned scanned = scan_dataset(keep_going);
  times_.set_stage_names(worker_stage_names(scanned.pipelines));
  if (keep_going && !keep_going()) {
    throw Error(ErrorCode::interrupted,
                fmt::format("{}: building the loader was interrupted before its workers started",
                            formats::source_name(opt_.source)));
  }
  const SegmentLayout layout(schema_, opt_.batch_size, design_.num_workers, scanned.sample_bound);
  // Read once: a stray launcher variable is one warning, and only where shared memory is shared.
  local_ranks_ = local_ranks(design_.num_workers > 0);
  if (design_.num_workers == 0) {
    start_inline(layout, std::move(scanned));
  } else {
    scanned.reader.reset();  // every handle is closed before the fork server is forked
    start_workers(layout);
  }
  source_->set_gate(fetcher_.get());
  filled_ = std::make_unique<FilledBatches>(
      slots_, dataset_, opt_.batch_size,
      FilledBatches::Outside{opt_.source, file_bytes_, local_ranks_, design_.num_workers > 0, opt_.timeout});
  plan_.batch_size = opt_.batch_size;
  stats_.workers = design_.num_workers;
  stats_.depth = slots_->num_slots();
  stats_.shm_bytes = slots_->segment().shared() ? slots_->segment().size() : 0;
  stats_.shm_backing = shm_backing_;
  built_downloads_ = fetches_.downloads;
  built_download_bytes_ = fetches_.bytes;
  // Threads (ours, and the CUDA driver's) start only now, after the fork server.
  if (opt_.device.staged()) {
    try {
      if (trace_) device_trace_ = std::make_unique<DeviceTraceTracks>(*trace_);
      feeder_ = std::make_unique<DeviceFeeder>(opt_, schema_, *this, device_trace_.get());
    } catch (...) {
      source_->stop(opt_.shutdown_grace);  // no destructor runs for a throwing constructor
      throw;
    }
  }
}

LoaderImpl::Scanned LoaderImpl::scan_dataset(const std::function<bool()>& keep_going) {
  Scanned s;
  // With workers, a probe process reads the file first (loader/child_reads/probe.h); no handle stays open here.
  std::optional<DatasetIdentity> identity = dataset_identity(opt_.source);  // before anything reads it
  ProbeResult probe;
  if (fetcher_) {
    const StreamedObjects& streamed = *remote_.streamed;
    probe = probe_streamed(
        opt_.source, design_.reader_options, *fetcher_, design_.num_workers > 0, opt_.timeout, keep_going,
        IndexAtHand{streamed.find_index, streamed.index_name, [this](const std::string& w) { warn(w); }});
  } else if (design_.num_workers == 0) {
    s.reader = formats::open_reader(opt_.source, design_.reader_options);
    probe = describe_dataset(*s.reader, opt_.source);
  } else {
    probe = probe_dataset(opt_.source, design_.reader_options, opt_.timeout, keep_going);
  }
  if (identity) identity->version = probe.version;
  const Schema& source_schema = probe.schema;
  design_.reader_options.shard_samples = probe.shard_samples;        // workers open a shard only to read it
  design_.reader_options.shard_identities = probe.shard_identities;  // and check it is the one counted
  shards_identity_ = shard_set_identity(opt_.source, probe.shard_samples);
  shard_starts_.assign(1, 0);
  for (std::uint64_t n : probe.shard_samples) shard_starts_.push_back(shard_starts_.back() + n);
  load_op_libraries(opt_.op_libraries);
  s.pipelines = SamplePipelines(opt_.pipeline, source_schema, opt_.seed, OpLimits{opt_.max_image_pixels});
  Delivery delivery =
      plan_delivery(opt_, s.pipelines.output(), probe, design_.num_workers, [this](const std::string& w) { warn(w); });
  schema_ = delivery.schema;
  source_description_ = probe.layout;
  metadata_ = std::move(probe.metadata);
  if (!probe.metadata_error.empty()) {
    warn(fmt::format("{}; the dataset's metadata (Loader::metadata) is left empty", probe.metadata_error));
  }
  if (const std::string pipeline = s.pipelines.describe(); !pipeline.empty()) {
    source_description_ += fmt::format("{}pipeline {}", source_description_.empty() ? "" : "; ", pipeline);
  }
  file_bytes_ = probe.file_bytes;
  s.sample_bound = delivery.sample_bound;
  check_delivered_names(schema_, formats::source_name(opt_.source), opt_.on_decode_error);
  check_fields_fit_device(schema_, opt_);
  dataset_ = std::make_shared<const DatasetSpec>(
      dataset_spec(opt_, design_.reader_options, source_schema, identity, delivery));
  std::shared_ptr<const MixTable> mix;
  std::uint64_t per_epoch = schema_.num_samples;
  if (!opt_.mix.empty()) {
    mix = make_mix_table(opt_.mix, probe.shard_samples, schema_.num_samples, design_.order, opt_.seed);
    per_epoch = opt_.samples_per_epoch != 0 ? opt_.samples_per_epoch : schema_.num_samples;
  }
  sampler_ = Sampler(per_epoch, opt_.batch_size, design_.order, opt_.seed, opt_.shard, opt_.drop_last,
                     probe.locality_rows, probe.shard_samples, std::move(mix));
  if (sampler_.batches_per_epoch() == 0) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: no batch per epoch: {} {}, batch_size {}, drop_last, {} shard(s)",
                            formats::source_name(opt_.source), sampler_.num_samples(),
                            opt_.mix.empty() ? "samples" : "draws of the mix per epoch", opt_.batch_size,
                            opt_.shard.world_size));
  }
  return s;
}

void LoaderImpl::start_inline(const SegmentLayout& layout, Scanned scanned) {
  // Without workers a batch is loaded when asked for: one buffer for it and those the loop keeps.
  const std::uint32_t depth = std::max(design_.prefetch, design_.held_slots + 1);
  slots_ = std::make_shared<SlotPool>(ShmSegment::create_private(layout.segment_bytes(depth)), layout, depth);
  if (opt_.transform.started) opt_.transform.started->discard();  // it would fork no worker here
  BatchFiller filler(scanned.reader ? LazyReader(std::move(scanned.reader), opt_.source) : LazyReader(*dataset_),
                     std::move(scanned.pipelines), opt_.on_decode_error);
  filler.set_transform(make_transform_stage(*dataset_, filler.pipelines().output(), opt_.batch_size));
  source_ = std::make_unique<InlineSource>(slots_, std::move(filler));
}

void LoaderImpl::start_workers(const SegmentLayout& layout) {
  const RingRequest request{design_.num_workers, design_.prefetch, design_.held_slots, opt_.shm_fraction};
  ReservedRing ring = reserve_ring(
      layout, request, compute_shm_budget(opt_.shm_fraction, opt_.shm_budget, local_ranks_), opt_.shm_backing);
  ring.warnings.push_back(oversubscription_warning_once(design_.num_workers));
  for (const auto& w : ring.warnings) w.empty() ? void() : warn(w);
  shm_backing_ = ring.backing;
  slots_ = std::make_shared<SlotPool>(std::move(ring.segment), layout, ring.depth);
  // Never below the trainer's own: lowering needs privilege, and would steer the OOM killer wrongly.
  const int oom_score_adj =
      opt_.worker_oom_score_adj > 0 ? std::max(opt_.worker_oom_score_adj, oom_score_adj_of(0).value_or(0)) : 0;
  auto workers = std::make_unique<WorkerSource>(
      slots_, ring.depth, design_.num_workers, dataset_, opt_.timeout,
      WorkerSource::RespawnPolicy{opt_.max_respawns, [this](const std::string& w) { warn(w); }, oom_score_adj});
  if (oom_score_adj > 0) {
    const std::optional<int> got = oom_score_adj_of(workers->server_pid());
    if (got != oom_score_adj) {
      warn(
          fmt::format("the kernel did not take oom_score_adj {} for the workers ({}): under memory pressure the "
                      "out-of-memory killer may pick the training process as readily as a worker",
                      oom_score_adj, got ? fmt::format("they have {}", *got) : std::string("unreadable")));
    }
  }
  workers->set_affinity_span(affinity_span(design_, sampler_.group(), opt_.shard.world_size, opt_.batch_size));
  const std::size_t cache_bytes = design_.auto_prefetch ? last_level_cache_bytes() : 0;  // sysfs: where it matters
  if (const auto limits = tuner_limits(design_, ring.depth, slots_->layout().slot_bytes(), cache_bytes))
    workers->set_auto_tuner(std::make_unique<AutoTuner>(*limits), design_.held_slots);
  source_ = std::move(workers);
}

LoaderImpl::~LoaderImpl() {
  if (::getpid() != owner_pid_) {
    // A fork of the owner: its workers, ring and device are the owner's. Nothing here may tell the
    // fork server to stop, push into the rings or wait for a staging thread this process does not
    // have; what this copy holds of them is let go without a word.
    if (source_) source_->disown();
    (void)feeder_.release();
    (void)fetcher_.release();       // its threads are the owner's
    (void)device_trace_.release();  // the released feeder's pool may still point at it
    (void)trace_.release();         // the owner's file, which it goes on writing
    return;
  }
  feeder_.reset();  // its thread draws from the workers
  if (source_) source_->stop(opt_.shutdown_grace);
  if (source_) source_->set_gate(nullptr);
  fetcher_.reset();  // its threads write to trace_, which goes first
}

void LoaderImpl::check_process() const {
  check_owner();
  if (detached_.load(std::memory_order_acquire)) {
    throw Error(ErrorCode::invalid_option,
                "stoker: this epoch's Loader was destroyed; an Epoch delivers batches while its Loader lives");
  }
}

void LoaderImpl::check_owner() const {
  if (::getpid() != owner_pid_) {
    throw Error(ErrorCode::wrong_process,
                fmt::format("stoker: this Loader belongs to process {} and its workers and shared memory with it; "
                            "process {} is a fork of it and cannot use it: build a Loader in this process instead",
                            owner_pid_, ::getpid()));
  }
}

void LoaderImpl::detach() noexcept {
  detached_.store(true, std::memory_order_release);
  // A wait for workers in another thread ends at once (a fork's copy of the wake-up descriptor is
  // its owner's: never written from a fork).
  if (::getpid() == owner_pid_) interrupt();
}

void LoaderImpl::warn(const std::string& message) const {
  if (trace_) trace_->warning(message);
  if (opt_.on_warning) {
    opt_.on_warning(message);
  } else {
    std::cerr << "stoker: warning: " << printable(message, Printable::message) << std::endl;
  }
}

std::uint32_t LoaderImpl::local_ranks(bool warn_if_stray) const {
  std::string warning;
  const std::uint32_t n = local_ranks_for_budget([](const char* name) { return std::getenv(name); }, warning);
  if (warn_if_stray && !warning.empty()) warn(warning);
  return n;
}

std::uint64_t LoaderImpl::start_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip) {
  check_process();
  std::lock_guard consumer(consumer_mu_);
  return start_epoch_locked(epoch, start_batch, skip);
}

std::uint64_t LoaderImpl::start_epoch_locked(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip) {
  const std::uint64_t batches = sampler_.batches_per_epoch(skip);
  if (!opt_.mix.empty() && epoch >= std::numeric_limits<std::uint64_t>::max() / sampler_.num_samples()) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("stoker: epoch {} of a mix of {} draws per epoch starts past draw 2^64, which the mix's "
                            "order does not reach",
                            epoch, sampler_.num_samples()));
  }
  if (start_batch > batches) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("stoker: start_batch {} is past the end of the epoch ({} batches)", start_batch, batches));
  }
  const std::uint64_t generation =
      feeder_ ? feeder_->start_epoch(epoch, start_batch, skip) : start_host_epoch(epoch, start_batch, skip);
  std::lock_guard lock(stats_mu_);
  progress_ = Progress{epoch, skip, start_batch, batches, false};
  user_generation_ = generation;
  times_.epoch_started();
  return generation;
}

std::optional<Batch> LoaderImpl::next(std::uint64_t generation) {
  check_process();
  std::lock_guard consumer(consumer_mu_);
  came_back();
  std::optional<Batch> b;
  const auto wait_failed = [&] {
    std::lock_guard lock(stats_mu_);
    times_.wait_failed();
  };
  try {
    b = feeder_ ? feeder_->next(generation) : next_host(generation);
  } catch (const Error&) {
    wait_failed();
    check_process();  // destroyed meanwhile: that is the error, not the interruption it caused
    throw;
  } catch (...) {
    wait_failed();
    throw;
  }
  std::lock_guard lock(stats_mu_);
  b ? times_.delivered(Clock::now(), b->index()) : times_.epoch_ended();
  if (generation == user_generation_) {
    if (b) {
      progress_.next_batch = b->index() + 1;
    } else {
      progress_.ended = true;
    }
  }
  return b;
}

bool LoaderImpl::wait_ready(std::uint64_t generation, std::chrono::milliseconds within) {
  if (detached_.load(std::memory_order_acquire)) return true;  // next() says why at once
  check_process();
  came_back();
  const auto until = Clock::now() + within;
  // Another thread's call (a next() that waits for its batch, an epoch started) counts against
  // `within` like the wait for data itself.
  // Polled: ThreadSanitizer cannot see a timed mutex's lock (pthread_mutex_clocklock).
  std::unique_lock consumer(consumer_mu_, std::defer_lock);
  while (!consumer.try_lock()) {
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  try {
    return feeder_ ? feeder_->wait_ready(generation, until) : wait_host_ready(generation, until);
  } catch (const Error&) {
    if (detached_.load(std::memory_order_acquire)) return true;  // destroyed meanwhile: next() says so
    throw;
  }
}

bool LoaderImpl::wait_host_ready(std::uint64_t generation, Clock::time_point until) {
  for (;;) {
    std::unique_lock host(host_mu_);
    if (detached_.load(std::memory_order_acquire)) return true;
    if (generation != generation_ || undelivered_ || handed_out_ == plan_.num_batches)
      return true;  // next() answers at once
    const auto t0 = Clock::now();
    const bool ready = source_->wait_filled(std::min(until, t0 + kLockSlice));
    {
      // Waiting here is waiting for data, as in next(): a consumer that waits in slices (the Python
      // package, to see Ctrl-C) stalls as much as one that calls next() at once.
      std::lock_guard lock(stats_mu_);
      stats_.wait_seconds += seconds_since(t0);
    }
    if (ready || Clock::now() >= until) return ready;
  }
}

LoaderState LoaderImpl::state() const {
  check_owner();
  std::lock_guard lock(stats_mu_);
  return state_locked();
}

LoaderState LoaderImpl::state_locked() const {
  LoaderState s;
  s.epoch = progress_.epoch;
  s.consumed = sampler_.consumed_after(progress_.skip, progress_.next_batch);
  s.epoch_finished = user_generation_ != 0 && (progress_.ended || progress_.next_batch == progress_.num_batches);
  s.seed = opt_.seed;
  s.order = sampler_.order_description();
  s.num_samples = sampler_.num_samples();
  s.fields = schema_.describe_fields();
  s.shards = shards_identity_;
  s.drawn = sampler_.mix_drawn(s.epoch, s.consumed);
  return s;
}

std::uint64_t LoaderImpl::resume(const LoaderState& state) {
  check_process();
  std::lock_guard consumer(consumer_mu_);
  check_resumable(state, this->state());
  if (state.drawn != sampler_.mix_drawn(state.epoch, state.consumed)) {
    throw Error(
        ErrorCode::state_mismatch,
        fmt::format("stoker: the loader state's draws per source ({}) are not this mix's at its position ({}): "
                    "it would resume another order",
                    fmt::join(state.drawn, ", "), fmt::join(sampler_.mix_drawn(state.epoch, state.consumed), ", ")));
  }
  return start_epoch_locked(state.epoch, 0, state.consumed);
}

std::uint64_t LoaderImpl::start_host_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip) {
  std::lock_guard host(host_mu_);
  source_->abandon();  // reads the previous plan_: before it changes
  if (fetcher_) fetcher_->abandon();
  undelivered_.reset();
  plan_ = sampler_.plan(epoch, skip);
  try {
    if (fetcher_) fetcher_->start(plan_, start_batch, shard_starts_);
  } catch (...) {
    ++generation_;  // the abandoned epoch is over: its next() says so, and never reads this plan
    throw;
  }
  source_->start(plan_, start_batch);
  handed_out_ = start_batch;
  return ++generation_;
}

Batch LoaderImpl::take(std::uint32_t s, std::vector<std::string>& warnings) {
  FilledBatch filled = filled_->take(s, warnings);
  std::uint64_t bytes = 0;
  for (const auto& f : filled.batch.fields()) bytes += f.bytes;
  std::lock_guard lock(stats_mu_);
  for (std::string& w : skipped_.take(filled.batch, filled.skip_notes, stats_)) warnings.push_back(std::move(w));
  const FillFacts& h = filled.facts;
  stats_.overflow_batches += h.read_outside;
  stats_.batches += 1;
  stats_.samples += h.num_samples;
  stats_.bytes += bytes;
  stats_.worker_busy_seconds += static_cast<double>(h.busy_ns) * 1e-9;
  stats_.shard_opens += h.shard_opens;
  times_.add_batch(h, slots_->in_use());
  return std::move(filled.batch);
}

std::optional<Batch> LoaderImpl::next_host(std::uint64_t generation) {
  // The wait in slices of host_mu_, so that stats() from another thread is not held up by it.
  for (;;) {
    std::unique_lock host(host_mu_);
    if (generation != generation_) {
      throw Error(ErrorCode::invalid_option,
                  "stoker: this epoch was ended by a later call to Loader::epoch(); iterate the newest one");
    }
    if (undelivered_) {
      Batch b = std::move(*undelivered_);
      undelivered_.reset();
      return b;
    }
    if (handed_out_ == plan_.num_batches) return std::nullopt;
    check_process();  // the Loader was destroyed while this thread waited
    const auto t0 = Clock::now();
    const bool ready = source_->wait_filled(t0 + kLockSlice);
    const std::uint32_t s = ready ? source_->next_filled() : 0;
    {
      std::lock_guard lock(stats_mu_);
      stats_.wait_seconds += seconds_since(t0);
    }
    if (!ready) continue;
    ++handed_out_;
    std::vector<std::string> warnings;
    const ShardFetcher::Taken taken(fetcher_.get(), handed_out_);  // delivered or not, its shards may go
    Batch b = take(s, warnings);
    try {
      for (const std::string& w : warnings) warn(w);
    } catch (...) {
      undelivered_ = std::move(b);  // an on_warning that throws: the next call delivers the batch
      throw;
    }
    return b;
  }
}

std::vector<int> LoaderImpl::worker_pids() const {
  check_owner();  // a fork may have copied host_mu_ held: never waited for there
  std::lock_guard host(host_mu_);
  return source_->pids();
}

Stats LoaderImpl::stats() const {
  check_owner();  // a fork may have copied host_mu_ held: never waited for there
  std::lock_guard host(host_mu_);
  Stats s;
  {
    std::lock_guard lock(stats_mu_);
    s = stats_;
    times_.fill(s);
  }
  if (feeder_) feeder_->add_stats(s);
  source_->add_stats(s);
  s.downloads = fetches_.downloads;
  s.download_bytes = fetches_.bytes;
  s.fetch_retries = fetches_.retries;
  s.cache_hits = fetches_.cache_hits;
  s.fetch_seconds = static_cast<double>(fetches_.nanoseconds) / 1e9;
  s.evictions = fetches_.evictions;
  if (fetcher_) s.fetch_wait_seconds += fetcher_->waited_seconds();  // and the source's, added above
  s.verdict = verdict(s, {usable_cpus_, design_.order == Order::quasi_random || !opt_.mix.empty(), opt_.device.staged(),
                          built_downloads_, built_download_bytes_});
  return s;
}

}  // namespace stoker::detail
