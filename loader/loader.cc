// The consumer side of the loader: hands batches out in task order (PyTorch's send_idx/rcvd_idx
// protocol) while workers fill slots ahead of it.
//
// Invariants (single consumer thread):
//   rcvd_idx_ <= send_idx_ <= num_batches_, and send_idx_ - rcvd_idx_ <= depth_;
//   task t (a batch index of the current epoch) lives in tasks_[t % depth_] while
//   rcvd_idx_ <= t < send_idx_; tasks of an abandoned epoch are drained before the next starts;
//   a slot is in exactly one of: the pool's free list, a task, a live Batch.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/wait.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <iostream>
#include <mutex>
#include <ostream>

#include "formats/reader.h"
#include "loader/device_feeder.h"
#include "loader/fork_server.h"
#include "loader/sampler.h"
#include "loader/shm_budget.h"
#include "loader/slot_pool.h"
#include "loader/worker.h"
#include "stoker/loader.h"
#include "util/posix_error.h"
#include "util/unique_fd.h"

namespace stoker {
namespace detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

UniqueFd make_eventfd() {
  UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd) throw_errno("eventfd");
  return fd;
}

void signal_eventfd(int fd) noexcept {
  std::uint64_t one = 1;
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

// A container size to suggest: bytes rounded up to whole GiB, or to 64 MiB below 1 GiB.
std::string docker_size(std::uint64_t bytes) {
  constexpr std::uint64_t kMiB = 1 << 20, kGiB = 1 << 30;
  if (bytes >= kGiB) return fmt::format("{}g", (bytes + kGiB - 1) / kGiB);
  return fmt::format("{}m", (bytes + 64 * kMiB - 1) / (64 * kMiB) * 64);
}

void validate(const Options& o) {
  if (o.source.empty()) throw Error("options: source is empty; set it to an HDF5 file or an LMDB database");
  if (o.batch_size == 0) throw Error("options: batch_size is 0; it must be at least 1");
  if (o.prefetch == 0) throw Error("options: prefetch is 0; it must be at least 1");
  if (o.num_workers > 1024) throw Error(fmt::format("options: num_workers {} is more than 1024", o.num_workers));
  if (!(o.shm_fraction > 0 && o.shm_fraction <= 0.5)) {
    throw Error(fmt::format("options: shm_fraction {} is outside (0, 0.5]", o.shm_fraction));
  }
  if (o.batch_size > (1u << 24)) throw Error(fmt::format("options: batch_size {} is too large", o.batch_size));
  if (o.device.staged() && o.prefetch_to_device == 0) {
    throw Error("options: prefetch_to_device is 0; it must be at least 1");
  }
}

}  // namespace

class LoaderImpl final : public HostSource {
 public:
  explicit LoaderImpl(Options options);
  ~LoaderImpl() override;

  std::uint64_t start_epoch(std::uint64_t epoch, std::uint64_t start_batch) {
    return feeder_ ? feeder_->start_epoch(epoch, start_batch) : start_host_epoch(epoch, start_batch);
  }
  std::optional<Batch> next(std::uint64_t generation) {
    return feeder_ ? feeder_->next(generation) : next_host(generation);
  }

  // HostSource: the shared-memory pipeline (the staging thread's, when there is one).
  std::uint64_t start_host_epoch(std::uint64_t epoch, std::uint64_t start_batch) override;
  std::optional<Batch> next_host(std::uint64_t generation) override;
  std::byte* slot_memory() const override { return pool_->segment().data(); }
  std::size_t slot_memory_bytes() const override { return pool_->segment().size(); }
  std::uint32_t depth() const override { return depth_; }
  void interrupt() noexcept override {
    if (interrupt_event_) signal_eventfd(interrupt_event_.get());
  }

  const Options& options() const { return opt_; }
  const Schema& schema() const { return schema_; }
  const Sampler& sampler() const { return sampler_; }
  Stats stats() const;
  std::vector<int> worker_pids() const {
    return server_ ? std::vector<int>(server_->worker_pids().begin(), server_->worker_pids().end()) : std::vector<int>{};
  }

 private:
  struct Task {
    std::uint32_t slot = 0;
    std::uint32_t worker = 0;
    bool arrived = false;
  };

  void create_shared_pool(const SegmentLayout& layout);
  void start_workers();
  // Sends every worker the stop sentinel and shuts the fork server down (idempotent).
  void stop_workers() noexcept;
  void warn(const std::string& message) const;
  void prepare_slot(std::uint32_t s, std::uint64_t batch);
  void dispatch();
  void drain_done();
  void check_exits();
  void wait_for(std::uint64_t task);
  void drain_in_flight();
  Batch take(std::uint32_t slot);
  [[noreturn]] void throw_held() const;
  [[noreturn]] void fail(std::string message);

  Options opt_;
  Schema schema_;
  Sampler sampler_;
  formats::ReaderOptions reader_options_;
  std::uint32_t num_workers_;
  std::uint32_t depth_ = 0;
  std::shared_ptr<SlotPool> pool_;
  std::unique_ptr<LazyReader> inline_reader_;  // num_workers_ == 0

  UniqueFd lifeline_;  // write end; only this process holds it
  UniqueFd done_event_;
  UniqueFd interrupt_event_;  // interrupt(): wakes wait_for() to give up
  std::vector<UniqueFd> task_events_;
  std::unique_ptr<ForkServer> server_;

  std::uint64_t generation_ = 0;
  std::uint64_t epoch_ = 0;
  std::vector<std::uint64_t> order_;
  std::uint64_t num_batches_ = 0;
  std::uint64_t send_idx_ = 0;
  std::uint64_t rcvd_idx_ = 0;
  std::vector<Task> tasks_;
  std::vector<std::uint32_t> outstanding_;  // per worker
  std::optional<std::string> broken_;
  mutable std::mutex stats_mu_;  // stats_ is written by the staging thread, read by the user's
  Stats stats_;
  std::unique_ptr<DeviceFeeder> feeder_;  // staged devices; started last, stopped first
};

LoaderImpl::LoaderImpl(Options options)
    : opt_((validate(options), std::move(options))),
      sampler_(0, 1, false, 0, {}, false),
      reader_options_{opt_.format, opt_.fields, formats::Hdf5Path::automatic},
      num_workers_(static_cast<std::uint32_t>(opt_.num_workers)) {
  {
    // Metadata is read here, and every handle closed again before any fork.
    auto reader = formats::open_reader(opt_.source, reader_options_);
    schema_ = reader->schema();
    if (num_workers_ == 0) inline_reader_ = std::make_unique<LazyReader>(std::move(reader));
  }
  sampler_ = Sampler(schema_.num_samples, opt_.batch_size, opt_.shuffle, opt_.seed, opt_.shard, opt_.drop_last);
  if (sampler_.batches_per_epoch() == 0) {
    throw Error(fmt::format("{}: no batch per epoch: {} samples, batch_size {}, drop_last, {} shard(s)", opt_.source,
                            schema_.num_samples, opt_.batch_size, opt_.shard.world_size));
  }
  SegmentLayout layout(schema_, opt_.batch_size, num_workers_);
  if (num_workers_ == 0) {
    depth_ = static_cast<std::uint32_t>(opt_.prefetch);
    pool_ = std::make_shared<SlotPool>(ShmSegment::create_private(layout.segment_bytes(depth_)), layout, depth_);
  } else {
    create_shared_pool(layout);
    start_workers();
  }
  tasks_.resize(depth_);
  outstanding_.assign(num_workers_, 0);
  stats_.workers = num_workers_;
  stats_.depth = depth_;
  stats_.shm_bytes = pool_->segment().shared() ? pool_->segment().size() : 0;
  // Threads (ours, and the CUDA driver's) start only now, after the fork server.
  if (opt_.device.staged()) {
    try {
      feeder_ = std::make_unique<DeviceFeeder>(opt_, schema_, *this);
    } catch (...) {
      stop_workers();  // the destructor does not run for a constructor that throws
      throw;
    }
  }
}

void LoaderImpl::warn(const std::string& message) const {
  if (opt_.on_warning) {
    opt_.on_warning(message);
  } else {
    std::cerr << "stoker: warning: " << message << std::endl;
  }
}

void LoaderImpl::create_shared_pool(const SegmentLayout& layout) {
  const std::uint32_t want = static_cast<std::uint32_t>(opt_.num_workers * opt_.prefetch);
  const std::uint32_t least = num_workers_;  // one slot per worker
  ShmBudget budget = compute_shm_budget(opt_.shm_fraction, opt_.shm_budget);
  auto refuse = [&](const std::string& why) {
    std::uint64_t needed = layout.segment_bytes(least);
    std::uint64_t container = static_cast<std::uint64_t>(static_cast<double>(layout.segment_bytes(want)) / opt_.shm_fraction);
    return Error(fmt::format(
        "stoker: not enough shared memory for {} workers: needs {} ({} batch slots of {} plus {} of control), {}. "
        "Start the container with --shm-size={} or more, use fewer workers, or smaller batches",
        num_workers_, format_bytes(needed), least, format_bytes(layout.slot_bytes()),
        format_bytes(layout.control_bytes(least)), why, docker_size(container)));
  };
  std::uint32_t depth = want;
  while (depth >= least && layout.segment_bytes(depth) > budget.bytes) --depth;
  if (depth < least) throw refuse(fmt::format("but the budget is {} ({})", format_bytes(budget.bytes), budget.reason));
  std::optional<ShmSegment> seg;
  for (;;) {
    seg = ShmSegment::try_create_shared(layout.segment_bytes(depth));
    if (seg) break;
    if (depth == least) {
      throw refuse(fmt::format("but reserving it failed with ENOSPC ({} free in /dev/shm)", format_bytes(budget.shm_free)));
    }
    depth = std::max(least, depth * 3 / 4);
  }
  if (depth < want) {
    warn(fmt::format("ring lowered from {} to {} batches ({} workers x prefetch {} needs {}; the budget is {}: {}); "
                     "workers may wait for the training loop. More shared memory (--shm-size) restores it",
                     want, depth, num_workers_, opt_.prefetch, format_bytes(layout.segment_bytes(want)),
                     format_bytes(budget.bytes), budget.reason));
  }
  depth_ = depth;
  pool_ = std::make_shared<SlotPool>(std::move(*seg), layout, depth);
}

void LoaderImpl::start_workers() {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw_errno("pipe for the worker lifeline");
  UniqueFd lifeline_read(pipe_fds[0]);
  lifeline_ = UniqueFd(pipe_fds[1]);
  done_event_ = make_eventfd();
  interrupt_event_ = make_eventfd();  // the trainer's alone: not kept in the children
  std::vector<int> keep{done_event_.get()};
  for (std::uint32_t w = 0; w < num_workers_; ++w) {
    task_events_.push_back(make_eventfd());
    keep.push_back(task_events_.back().get());
  }
  WorkerContext base;
  base.view = pool_->view();
  base.done_event = done_event_.get();
  base.lifeline = lifeline_read.get();
  base.path = opt_.source;
  base.reader_options = reader_options_;
  base.expected = schema_;
  auto worker_main = [this, base](std::uint32_t w) {
    pool_->segment().prefault();  // this process's page tables, once
    WorkerContext ctx = base;
    ctx.worker = w;
    ctx.task_event = task_events_[w].get();
    run_worker(ctx);
  };
  server_ = std::make_unique<ForkServer>(num_workers_, worker_main, keep, lifeline_read.get());
}

LoaderImpl::~LoaderImpl() {
  feeder_.reset();  // its thread draws from the workers
  stop_workers();
}

void LoaderImpl::stop_workers() noexcept {
  if (!server_) return;
  for (std::uint32_t w = 0; w < num_workers_; ++w) {
    pool_->view().channel(w).tasks.push(kStopWorker);  // a full ring: the server kills it after the grace
    signal_eventfd(task_events_[w].get());
  }
  server_->shutdown(opt_.shutdown_grace);
  server_.reset();
}

void LoaderImpl::prepare_slot(std::uint32_t s, std::uint64_t batch) {
  const SegmentView& v = pool_->view();
  SlotHeader& h = v.slot_header(s);
  const std::uint64_t first = batch * opt_.batch_size;
  const std::uint64_t n = std::min<std::uint64_t>(opt_.batch_size, order_.size() - first);
  h.task_id = batch;
  h.epoch = epoch_;
  h.batch_index = batch;
  h.num_samples = static_cast<std::uint32_t>(n);
  h.status = static_cast<std::uint32_t>(SlotStatus::empty);
  h.error_bytes = 0;
  h.busy_ns = 0;
  std::copy_n(order_.begin() + static_cast<std::ptrdiff_t>(first), n, v.slot_indices(s));
}

void LoaderImpl::dispatch() {
  while (send_idx_ < num_batches_ && send_idx_ - rcvd_idx_ < depth_) {
    auto s = pool_->acquire();
    if (!s) break;
    prepare_slot(*s, send_idx_);
    auto w = static_cast<std::uint32_t>(std::min_element(outstanding_.begin(), outstanding_.end()) - outstanding_.begin());
    pool_->view().channel(w).tasks.push(*s);  // cannot fail: slots outnumber nothing
    signal_eventfd(task_events_[w].get());
    tasks_[send_idx_ % depth_] = Task{*s, w, false};
    ++outstanding_[w];
    ++send_idx_;
  }
}

void LoaderImpl::drain_done() {
  const SegmentView& v = pool_->view();
  for (std::uint32_t w = 0; w < num_workers_; ++w) {
    WorkerChannel ch = v.channel(w);
    std::uint32_t s;
    while (ch.done.pop(s)) tasks_[v.slot_header(s).task_id % depth_].arrived = true;
  }
}

void LoaderImpl::fail(std::string message) {
  broken_ = std::move(message);
  throw Error(*broken_);
}

void LoaderImpl::check_exits() {
  std::optional<WorkerExit> exit;
  try {
    exit = server_->poll_exit();
  } catch (const Error& e) {
    fail(e.what());
  }
  if (!exit) return;
  std::string held = "while idle";
  for (std::uint64_t t = rcvd_idx_; t < send_idx_; ++t) {
    const Task& task = tasks_[t % depth_];
    if (task.worker == exit->worker && !task.arrived) {
      const SegmentView& v = pool_->view();
      const SlotHeader& h = v.slot_header(task.slot);
      const std::uint64_t* idx = v.slot_indices(task.slot);
      held = fmt::format("while loading batch {} of epoch {} (samples {}{})", t, epoch_,
                         fmt::join(idx, idx + std::min<std::uint32_t>(h.num_samples, 8), ", "),
                         h.num_samples > 8 ? ", ..." : "");
      break;
    }
  }
  std::string hint;
  if (WIFSIGNALED(exit->wait_status) && WTERMSIG(exit->wait_status) == SIGKILL) {
    hint = "; SIGKILL often comes from the out-of-memory killer (see dmesg)";
  } else if (WIFSIGNALED(exit->wait_status) && WTERMSIG(exit->wait_status) == SIGBUS) {
    hint = "; SIGBUS: a file it read was truncated, or memory ran out";
  }
  fail(fmt::format("stoker: worker {} (pid {}) {} {}{}; the loader cannot continue", exit->worker, exit->pid,
                   describe_wait_status(exit->wait_status), held, hint));
}

void LoaderImpl::wait_for(std::uint64_t t) {
  const auto start = Clock::now();
  for (;;) {
    drain_done();
    if (tasks_[t % depth_].arrived) return;
    check_exits();
    int timeout_ms = -1;
    if (opt_.timeout.count() > 0) {
      auto left = opt_.timeout - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
      timeout_ms = static_cast<int>(std::max<std::int64_t>(0, left.count()));
    }
    pollfd fds[3] = {{done_event_.get(), POLLIN, 0}, {server_->report_fd(), POLLIN, 0},
                     {interrupt_event_.get(), POLLIN, 0}};
    int r = ::poll(fds, 3, timeout_ms);
    if (r > 0 && (fds[2].revents & POLLIN)) throw Error("stoker: the loader is shutting down");
    if (r < 0 && errno != EINTR) throw_errno("poll for worker results");
    if (r == 0) {
      drain_done();
      if (tasks_[t % depth_].arrived) return;
      const Task& task = tasks_[t % depth_];
      fail(fmt::format("stoker: worker {} (pid {}) has not delivered batch {} of epoch {} within {} ms and is still "
                       "running (see where it is stuck with: gdb -p {}); raise Options::timeout if batches are "
                       "legitimately that slow",
                       task.worker, server_->worker_pids()[task.worker], t, epoch_, opt_.timeout.count(),
                       server_->worker_pids()[task.worker]));
    }
    if (fds[0].revents & POLLIN) {
      std::uint64_t count;
      (void)!::read(done_event_.get(), &count, sizeof count);
    }
  }
}

void LoaderImpl::drain_in_flight() {
  while (rcvd_idx_ < send_idx_) {
    wait_for(rcvd_idx_);
    const Task& task = tasks_[rcvd_idx_ % depth_];
    --outstanding_[task.worker];
    pool_->release(task.slot);
    ++rcvd_idx_;
  }
}

std::uint64_t LoaderImpl::start_host_epoch(std::uint64_t epoch, std::uint64_t start_batch) {
  if (broken_) throw Error(*broken_);
  if (server_) drain_in_flight();
  if (start_batch > sampler_.batches_per_epoch()) {
    throw Error(fmt::format("stoker: start_batch {} is past the end of the epoch ({} batches)", start_batch,
                            sampler_.batches_per_epoch()));
  }
  epoch_ = epoch;
  order_ = sampler_.epoch_order(epoch);
  num_batches_ = sampler_.batches_per_epoch();
  send_idx_ = rcvd_idx_ = start_batch;
  if (server_) dispatch();  // workers start on the first batches before the first next()
  return ++generation_;
}

void LoaderImpl::throw_held() const {
  auto held = pool_->held_batches();
  throw Error(fmt::format(
      "stoker: all {} batch slots are held by live stoker::Batch objects (batches {} of epoch {}), so no batch can be "
      "loaded: destroy or release() the batches you no longer need, copy what you want to keep, or raise "
      "Options::prefetch",
      depth_, fmt::join(held, ", "), epoch_));
}

Batch LoaderImpl::take(std::uint32_t s) {
  const SegmentView& v = pool_->view();
  const SlotHeader& h = v.slot_header(s);
  if (h.status != static_cast<std::uint32_t>(SlotStatus::ok)) {
    std::string message(v.error(s));
    pool_->release(s);
    if (server_) dispatch();
    throw Error(message);
  }
  {
    std::lock_guard lock(stats_mu_);
    stats_.batches += 1;
    stats_.samples += h.num_samples;
    stats_.bytes += h.num_samples * schema_.bytes_per_sample();
    stats_.worker_busy_seconds += static_cast<double>(h.busy_ns) * 1e-9;
  }
  return pool_->make_batch(s);
}

std::optional<Batch> LoaderImpl::next_host(std::uint64_t generation) {
  if (generation != generation_) {
    throw Error("stoker: this epoch was ended by a later call to Loader::epoch(); iterate the newest one");
  }
  if (broken_) throw Error(*broken_);
  if (rcvd_idx_ == num_batches_) return std::nullopt;
  const auto t0 = Clock::now();
  if (!server_) {
    auto s = pool_->acquire();
    if (!s) throw_held();
    prepare_slot(*s, rcvd_idx_++);
    fill_slot(pool_->view(), *s, *inline_reader_, "stoker");
    {
      std::lock_guard lock(stats_mu_);
      stats_.wait_seconds += seconds_since(t0);
    }
    return take(*s);
  }
  check_exits();  // a dead worker is reported at once, not only when its batch is due
  dispatch();
  if (send_idx_ == rcvd_idx_) throw_held();
  wait_for(rcvd_idx_);
  const Task task = tasks_[rcvd_idx_ % depth_];
  --outstanding_[task.worker];
  ++rcvd_idx_;
  {
    std::lock_guard lock(stats_mu_);
    stats_.wait_seconds += seconds_since(t0);
  }
  Batch b = take(task.slot);
  dispatch();
  return b;
}

Stats LoaderImpl::stats() const {
  Stats s;
  {
    std::lock_guard lock(stats_mu_);
    s = stats_;
  }
  if (feeder_) feeder_->add_stats(s);
  if (server_) {
    for (std::uint32_t w = 0; w < num_workers_; ++w) {
      s.worker_cpu_seconds += static_cast<double>(pool_->view().channel(w).cpu_ns->load()) * 1e-9;
    }
  }
  return s;
}

}  // namespace detail

Loader::Loader(Options options) : impl_(std::make_unique<detail::LoaderImpl>(std::move(options))) {}
Loader::~Loader() = default;

Epoch Loader::epoch(std::uint64_t epoch, std::uint64_t start_batch) {
  return Epoch(impl_.get(), impl_->start_epoch(epoch, start_batch));
}

const Schema& Loader::schema() const { return impl_->schema(); }
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
             s.batches, s.samples, format_bytes(s.bytes), s.wait_seconds, s.worker_busy_seconds,
             s.worker_cpu_seconds, s.workers, s.depth, format_bytes(s.shm_bytes));
}

}  // namespace stoker
