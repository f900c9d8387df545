#include "loader/processes/worker_pool.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <string_view>

#include "base/deadline.h"
#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "loader/children/program_image.h"
#include "loader/worker/worker.h"
#include "loader/worker/worker_setup.h"
#include "stoker/error.h"
#include "stoker/version.h"

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

WorkerPool::WorkerPool(std::shared_ptr<SlotPool> slots, std::uint32_t num_workers,
                       std::shared_ptr<const DatasetSpec> dataset, int oom_score_adj)
    : slots_(std::move(slots)), dataset_(std::move(dataset)), num_workers_(num_workers), oom_score_adj_(oom_score_adj) {
  done_event_ = make_eventfd();
  interrupt_event_ = make_eventfd();
  keep_ = {done_event_.get()};
  for (std::uint32_t w = 0; w < num_workers_; ++w) {
    task_events_.push_back(make_eventfd());
    keep_.push_back(task_events_.back().get());
  }
  worker_main_ = [this](std::uint32_t w) {
    slots_->segment().prefault();  // this process's page tables, once
    run_worker(WorkerContext{&slots_->layout(), slots_->segment().data(), slots_->segment().size(), w,
                             task_events_[w].get(), done_event_.get(), lifeline_.read_end(), dataset_.get()});
  };
  std::optional<ProgramImage> image = fork_server_image();
  if (!dataset_->transform_host.empty()) {
    image = ProgramImage{dataset_->transform_host.front(), dataset_->transform_host};  // the transform's host
  }
  if (image) {
    // A fresh exec of this program serves the workers: it gets the same settings as text and the
    // same descriptors over its socket (loader/processes/exec_server.h).
    RingSetup ring;
    ring.num_workers = num_workers_;
    ring.batch_size = slots_->layout().batch_size();
    ring.sample_bound = slots_->layout().sample_bound();
    ring.segment_bytes = slots_->segment().size();
    ring.stoker_version = std::string(version());
    ring.option_spelling = option_spelling();
    exec_.emplace();
    exec_->setup = setup_to_json(*dataset_, ring);
    exec_->fds = {slots_->segment().fd(), lifeline_.read_end(), done_event_.get()};
    for (const auto& t : task_events_) exec_->fds.push_back(t.get());
    exec_->program = std::move(image->path);
    exec_->argv = std::move(image->argv);
    if (!dataset_->transform_host.empty()) {
      exec_->started = dataset_->transform_started;  // taken once: a restarted server is started anew
      exec_->role = fmt::format(
          "the transform's host {}, which must call stoker::serve_transform_host "
          "(stoker/transform.h) and did not answer as one; its standard error says why",
          exec_->program);
    }
  }
  server_ = std::make_unique<ForkServer>(num_workers_, worker_main_, keep_, lifeline_.read_end(),
                                         exec_ ? &*exec_ : nullptr, oom_score_adj_);
}

WorkerPool::~WorkerPool() { stop(std::chrono::milliseconds(0)); }

std::vector<int> WorkerPool::pids() const {
  if (!server_) return {};
  return {server_->worker_pids().begin(), server_->worker_pids().end()};
}

void WorkerPool::assign(std::uint32_t worker, std::uint32_t slot) {
  WorkerChannel ch = slots_->view().channel(worker);
  ch.tasks.push(slot);  // cannot fail: a ring holds every slot
  // The push, then the look at whether it sleeps: a worker at work finds the task itself.
  shared_memory_fence();
  if (ch.idle->load(std::memory_order_relaxed) != 0) signal_eventfd(task_events_[worker].get());
}

WorkerPool::Wake WorkerPool::wait(std::chrono::milliseconds timeout) {
  pollfd fds[3] = {
      {done_event_.get(), POLLIN, 0}, {server_->report_fd(), POLLIN, 0}, {interrupt_event_.get(), POLLIN, 0}};
  const int r = poll_until(fds, 3, deadline_in(timeout));
  if (r < 0) throw_errno("poll for worker results");
  if (r > 0 && fds[1].revents) reports_pending_ = true;
  if (r > 0 && (fds[2].revents & POLLIN)) return Wake::interrupted;
  if (r == 0) return Wake::timeout;
  if (r > 0 && (fds[0].revents & POLLIN)) {
    std::uint64_t count;
    (void)!::read(done_event_.get(), &count, sizeof count);
    ++wakes_;
  }
  return Wake::activity;
}

std::optional<WorkerExit> WorkerPool::poll_exit() {
  const auto now = std::chrono::steady_clock::now();
  if (!reports_pending_ && now < next_exit_look_) return std::nullopt;
  next_exit_look_ = now + kExitLook;
  std::optional<WorkerExit> exit = server_->poll_exit();
  reports_pending_ = exit.has_value();  // none left, until a wait sees the socket again
  return exit;
}

void WorkerPool::await_slot(std::optional<std::uint32_t> slot) noexcept {
  slots_->view().awaited_slot().store(slot ? std::uint64_t{*slot} + 1 : 0, std::memory_order_relaxed);
  shared_memory_fence();  // the store, then the look at the done rings
}

std::vector<pid_t> WorkerPool::bury_workers() noexcept {
  std::vector<pid_t> alive;
  alive.reserve(num_workers_);
  server_->shutdown(std::chrono::milliseconds(0));  // reaps the dead server
  // Not our children (the server's): watched through the pidfds taken when each started, never
  // ones opened now by pids that ended, reaped workers may have left to other processes. Up to
  // 10 s for all to end; then SIGKILL to those left, and 1 s more for all of them.
  std::vector<std::uint32_t> left;
  for (const auto& [wait, kill] :
       {std::pair{std::chrono::seconds(10), true}, std::pair{std::chrono::seconds(1), false}}) {
    left.clear();
    const auto deadline = deadline_in(wait);
    for (std::uint32_t w = 0; w < num_workers_; ++w) {
      const int fd = server_->worker_pidfd(w);
      if (fd < 0) continue;
      pollfd p{fd, POLLIN, 0};
      if (poll_until(&p, 1, deadline) <= 0) left.push_back(w);
    }
    if (left.empty()) break;
    for (const std::uint32_t w : left) {
      if (kill) (void)::syscall(SYS_pidfd_send_signal, server_->worker_pidfd(w), SIGKILL, nullptr, 0);
    }
  }
  for (const std::uint32_t w : left) alive.push_back(server_->worker_pids()[w]);
  return alive;
}

bool WorkerPool::has_ended(std::uint32_t w) const noexcept {
  const int fd = server_ ? server_->worker_pidfd(w) : -1;
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

void WorkerPool::retire_channel(std::uint32_t worker) noexcept {
  // Nobody reads the dead worker's ring: drop what it had not taken (it is given again). Its
  // replacement counts its CPU time from zero: keep what the dead one used; and it is working on
  // no sample until it says so.
  WorkerChannel ch = slots_->view().channel(worker);
  ch.tasks.clear_from_producer();
  retired_cpu_ns_ += ch.cpu_ns->exchange(0);
  ch.sample->store(0, std::memory_order_relaxed);
  ch.idle->store(1, std::memory_order_relaxed);  // as a worker that has not run yet
}

void WorkerPool::restart_server() {
  reports_pending_ = true;
  for (std::uint32_t w = 0; w < num_workers_; ++w) retire_channel(w);
  server_.reset();
  server_ =
      std::make_unique<ForkServer>(num_workers_, worker_main_, keep_, lifeline_.read_end(), &*exec_, oom_score_adj_);
}

void WorkerPool::kill(std::uint32_t w) noexcept {
  if (server_) server_->kill_worker(w, pid(w));
}

void WorkerPool::interrupt() noexcept {
  if (interrupt_event_) signal_eventfd(interrupt_event_.get());
}

pid_t WorkerPool::respawn(std::uint32_t worker, const std::vector<std::uint32_t>& slots) {
  retire_channel(worker);
  reports_pending_ = true;  // exits reported while it waited for the new worker are kept there
  const pid_t pid = server_->respawn(worker);
  for (std::uint32_t s : slots) slots_->view().channel(worker).tasks.push(s);
  signal_eventfd(task_events_[worker].get());
  return pid;
}

bool WorkerPool::stopped(std::uint32_t w) const noexcept {
  const pid_t worker_pid = pid(w);
  if (worker_pid <= 0) return false;
  // /proc/PID/stat: "pid (comm) S ...": the state follows the last ')' (comm may hold one).
  char buf[512];
  std::snprintf(buf, sizeof buf, "/proc/%d/stat", static_cast<int>(worker_pid));
  UniqueFd fd(::open(buf, O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  const ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) return false;
  const std::string_view stat(buf, static_cast<std::size_t>(n));
  const std::size_t close = stat.rfind(')');
  if (close == std::string_view::npos || close + 2 >= stat.size()) return false;
  const char state = stat[close + 2];
  return state == 'T' || state == 't';
}

double WorkerPool::cpu_seconds() const {
  double s = static_cast<double>(retired_cpu_ns_) * 1e-9;
  for (std::uint32_t w = 0; w < num_workers_; ++w) {
    s += static_cast<double>(slots_->view().channel(w).cpu_ns->load()) * 1e-9;
  }
  return s;
}

void WorkerPool::disown() noexcept {
  if (server_) server_->disown();
  server_.reset();
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
