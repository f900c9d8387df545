#include "loader/worker_pool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "loader/worker.h"
#include "util/posix_error.h"

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
  server_ = std::make_unique<ForkServer>(num_workers_, worker_main, keep, lifeline_.read_end());
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
  pollfd fds[3] = {{done_event_.get(), POLLIN, 0}, {server_->report_fd(), POLLIN, 0},
                   {interrupt_event_.get(), POLLIN, 0}};
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

void WorkerPool::interrupt() noexcept {
  if (interrupt_event_) signal_eventfd(interrupt_event_.get());
}

pid_t WorkerPool::respawn(std::uint32_t worker, const std::vector<std::uint32_t>& slots) {
  // Nobody reads the dead worker's ring: drop what it had not taken, then give everything again.
  WorkerChannel ch = slots_->view().channel(worker);
  ch.tasks.clear_from_producer();
  // The replacement counts its CPU time from zero: keep what the dead one used.
  retired_cpu_ns_ += ch.cpu_ns->exchange(0);
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
