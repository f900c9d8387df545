#include "loader/workers/worker_pool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "loader/base/posix_error.h"
#include "loader/pipeline/pipeline.h"
#include "loader/workers/program_image.h"
#include "loader/workers/worker.h"
#include "loader/workers/worker_setup.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

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

}  // namespace

WorkerPool::WorkerPool(std::shared_ptr<SlotPool> slots, std::uint32_t num_workers, Dataset dataset)
    : slots_(std::move(slots)), num_workers_(num_workers) {
  done_event_ = make_eventfd();
  interrupt_event_ = make_eventfd();
  std::vector<int> keep{done_event_.get()};
  for (std::uint32_t w = 0; w < num_workers_; ++w) {
    task_events_.push_back(make_eventfd());
    keep.push_back(task_events_.back().get());
  }
  WorkerContext base;
  base.view = slots_->view();
  base.done_event = done_event_.get();
  base.lifeline = lifeline_.read_end();
  base.path = std::move(dataset.path);
  base.reader_options = std::move(dataset.reader_options);
  base.expected = std::move(dataset.expected);
  base.pipeline = std::move(dataset.pipeline);
  base.seed = dataset.seed;
  auto worker_main = [this, base](std::uint32_t w) {
    slots_->segment().prefault();  // this process's page tables, once
    WorkerContext ctx = base;
    ctx.worker = w;
    ctx.task_event = task_events_[w].get();
    run_worker(ctx);
  };
  worker_main_ = worker_main;
  keep_ = keep;
  std::optional<ExecStart>& exec = exec_;
  if (program_initialised()) {
    // A fresh exec of this program serves the workers: it gets the same settings as text and the
    // same descriptors over its socket (serve_exec_fork_server below).
    WorkerSetup setup;
    setup.path = base.path;
    setup.reader_options = base.reader_options;
    setup.reader_options.known.reset();
    setup.expected = base.expected;
    setup.pipeline = base.pipeline;
    setup.seed = base.seed;
    setup.num_workers = num_workers_;
    setup.batch_size = slots_->layout().batch_size();
    setup.sample_bound = slots_->layout().sample_bound();
    setup.segment_bytes = slots_->segment().size();
    exec.emplace();
    exec->setup = setup.to_json();
    exec->fds = {slots_->segment().fd(), lifeline_.read_end(), done_event_.get()};
    for (const auto& t : task_events_) exec->fds.push_back(t.get());
    exec->argv = program_arguments();
  }
  server_ =
      std::make_unique<ForkServer>(num_workers_, worker_main, keep, lifeline_.read_end(), exec ? &*exec : nullptr);
}

void serve_exec_fork_server(int sock) {
  // Everything that can fail is checked before serving, and reported to the loader.
  std::function<void(std::uint32_t)> worker_main;
  std::vector<int> keep;
  int lifeline = -1;
  std::uint32_t num_workers = 0;
  try {
    ReceivedSetup received = receive_setup(sock);
    WorkerSetup setup = WorkerSetup::from_json(received.setup);
    if (received.fds.size() != kSetupFixedFds + setup.num_workers) {
      throw Error(ErrorCode::internal, fmt::format("stoker: the worker setup came with {} descriptors, not {}",
                                                      received.fds.size(), kSetupFixedFds + setup.num_workers));
    }
    // Kept for the process's life: the mapping, the layout and the descriptors the workers use.
    static ShmSegment segment = ShmSegment::map_shared(received.fds[0].get(), setup.segment_bytes);
    const Schema delivered = SamplePipelines(setup.pipeline, setup.expected, setup.seed).output();
    static const SegmentLayout layout(delivered, setup.batch_size, setup.num_workers, setup.sample_bound);
    static std::vector<UniqueFd> fds = std::move(received.fds);
    WorkerContext base;
    base.view = SegmentView(segment.data(), layout);
    base.lifeline = fds[1].get();
    base.done_event = fds[2].get();
    base.path = setup.path;
    base.reader_options = setup.reader_options;
    base.expected = setup.expected;
    base.pipeline = setup.pipeline;
    base.seed = setup.seed;
    lifeline = fds[1].get();
    num_workers = setup.num_workers;
    for (std::size_t i = 2; i < fds.size(); ++i) keep.push_back(fds[i].get());
    worker_main = [base](std::uint32_t w) {
      segment.prefault();
      WorkerContext ctx = base;
      ctx.worker = w;
      ctx.task_event = fds[kSetupFixedFds + w].get();
      run_worker(ctx);
    };
  } catch (const std::exception& e) {
    fail_setup(sock, e.what());
  }
  serve(sock, lifeline, num_workers, worker_main, std::move(keep));
}

WorkerPool::~WorkerPool() { stop(std::chrono::milliseconds(0)); }

std::vector<int> WorkerPool::pids() const {
  if (!server_) return {};
  return {server_->worker_pids().begin(), server_->worker_pids().end()};
}

void WorkerPool::assign(std::uint32_t worker, std::uint32_t slot) {
  slots_->view().channel(worker).tasks.push(slot);  // cannot fail: a ring holds every slot
  signal_eventfd(task_events_[worker].get());
}

WorkerPool::Wake WorkerPool::wait(std::chrono::milliseconds timeout) {
  pollfd fds[3] = {
      {done_event_.get(), POLLIN, 0}, {server_->report_fd(), POLLIN, 0}, {interrupt_event_.get(), POLLIN, 0}};
  const int timeout_ms = timeout.count() < 0 ? -1 : static_cast<int>(timeout.count());
  int r = ::poll(fds, 3, timeout_ms);
  if (r < 0 && errno != EINTR) throw_errno("poll for worker results");
  if (r > 0 && (fds[2].revents & POLLIN)) return Wake::interrupted;
  if (r == 0) return Wake::timeout;
  if (r > 0 && (fds[0].revents & POLLIN)) {
    std::uint64_t count;
    (void)!::read(done_event_.get(), &count, sizeof count);
  }
  return Wake::activity;
}

void WorkerPool::bury_workers() noexcept {
  const std::vector<pid_t> pids = server_->worker_pids();
  server_->shutdown(std::chrono::milliseconds(0));  // reaps the dead server
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : pids) {
    if (pid <= 0) continue;
    // Not our children (the server's): watched through a pidfd, readable once the process ended.
    UniqueFd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    if (!fd) continue;  // ESRCH: gone already
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd.get(), POLLIN, 0};
      const int r = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0)));
      if (r > 0) break;
      if (r < 0 && errno == EINTR) continue;
      (void)::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0);  // the deadline passed
      p.revents = 0;
      (void)::poll(&p, 1, 1000);
      break;
    }
  }
}

void WorkerPool::retire_channel(std::uint32_t worker) noexcept {
  // Nobody reads the dead worker's ring: drop what it had not taken (it is given again). Its
  // replacement counts its CPU time from zero: keep what the dead one used.
  WorkerChannel ch = slots_->view().channel(worker);
  ch.tasks.clear_from_producer();
  retired_cpu_ns_ += ch.cpu_ns->exchange(0);
}

void WorkerPool::restart_server() {
  for (std::uint32_t w = 0; w < num_workers_; ++w) retire_channel(w);
  server_.reset();
  server_ = std::make_unique<ForkServer>(num_workers_, worker_main_, keep_, lifeline_.read_end(), &*exec_);
}

void WorkerPool::interrupt() noexcept {
  if (interrupt_event_) signal_eventfd(interrupt_event_.get());
}

pid_t WorkerPool::respawn(std::uint32_t worker, const std::vector<std::uint32_t>& slots) {
  retire_channel(worker);
  const pid_t pid = server_->respawn(worker);
  for (std::uint32_t s : slots) slots_->view().channel(worker).tasks.push(s);
  signal_eventfd(task_events_[worker].get());
  return pid;
}

double WorkerPool::cpu_seconds() const {
  double s = static_cast<double>(retired_cpu_ns_) * 1e-9;
  for (std::uint32_t w = 0; w < num_workers_; ++w) {
    s += static_cast<double>(slots_->view().channel(w).cpu_ns->load()) * 1e-9;
  }
  return s;
}

void WorkerPool::stop(std::chrono::milliseconds grace) noexcept {
  if (!server_) return;
  for (std::uint32_t w = 0; w < num_workers_; ++w) {
    slots_->view().channel(w).tasks.push(kStopWorker);  // a full ring: the server kills it after the grace
    signal_eventfd(task_events_[w].get());
  }
  server_->shutdown(grace);
  server_.reset();
}

std::string describe_worker_death(const WorkerExit& exit, const std::string& held) {
  std::string hint;
  if (WIFSIGNALED(exit.wait_status) && WTERMSIG(exit.wait_status) == SIGKILL) {
    hint = "; SIGKILL often comes from the out-of-memory killer (see dmesg)";
  } else if (WIFSIGNALED(exit.wait_status) && WTERMSIG(exit.wait_status) == SIGBUS) {
    hint = "; SIGBUS: a file it read was truncated, or memory ran out";
  }
  return fmt::format("worker {} (pid {}) {} {}{}", exit.worker, exit.pid, describe_wait_status(exit.wait_status), held,
                     hint);
}

}  // namespace stoker::detail
