#include "loader/worker/worker.h"

#include <fmt/format.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <string>

#include "base/deadline.h"
#include "base/env.h"
#include "loader/children/child_exit.h"
#include "loader/worker/batch_filler.h"

namespace stoker::detail {
namespace {

std::uint64_t cpu_ns() noexcept {
  timespec ts;
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

void run_worker(const WorkerContext& ctx) {
  const std::string who = fmt::format("worker {} (pid {})", ctx.worker, ::getpid());
  if (const std::string why = ctx.layout->check(ctx.segment, ctx.segment_bytes); !why.empty()) {
    std::fprintf(stderr, "stoker: %s refuses the loader's shared memory: %s\n", who.c_str(), why.c_str());
    ::_exit(static_cast<int>(ChildExit::ring_refused));
  }
  const SegmentView view(ctx.segment, *ctx.layout);
  WorkerChannel ch = view.channel(ctx.worker);
  // The pipelines are built again here, from their text: they are data, whatever the process.
  BatchFiller filler(*ctx.dataset, ctx.layout->batch_size());
  filler.set_progress_counters(ch.progress, ch.sample);
  std::uint64_t advised = 0;  // ring positions below this were read ahead
  for (;;) {
    // Asleep only with nothing to do: it says so, then looks at its ring once more; the consumer
    // writes the eventfd only to a worker that said so (WorkerChannel::idle).
    ch.idle->store(1, std::memory_order_relaxed);
    shared_memory_fence();
    if (ch.tasks.read_position() == ch.tasks.write_position()) {
      pollfd fds[2] = {{ctx.task_event, POLLIN, 0}, {ctx.lifeline, POLLIN, 0}};
      if (poll_until(fds, 2, Clock::time_point::max()) < 0) return;
      if (fds[1].revents) return;  // the trainer is gone
      std::uint64_t count;
      if (::read(ctx.task_event, &count, sizeof count) < 0 && errno != EAGAIN) return;
    }
    ch.idle->store(0, std::memory_order_relaxed);
    std::uint32_t s;
    for (;;) {
      // Large samples not in the page cache: the storage reads of every batch queued for this
      // worker run while the first is copied.
      const std::uint64_t queued = ch.tasks.write_position();
      for (std::uint64_t p = std::max(advised, ch.tasks.read_position()); p < queued; ++p) {
        const std::uint32_t t = ch.tasks.item_at(p);
        if (t != kStopWorker) filler.read_ahead(view, t);
      }
      advised = std::max(advised, queued);
      if (!ch.tasks.pop(s)) break;
      if (s == kStopWorker) return;
      view.slot_header(s).worker = ctx.worker;
      ch.progress->fetch_add(1, std::memory_order_relaxed);
      filler.fill(view, s, who);
      Env::get().filled_slot(view.slot_begin(s), view.slot_bytes());
      ch.cpu_ns->store(cpu_ns(), std::memory_order_relaxed);
      ch.progress->fetch_add(1, std::memory_order_relaxed);
      ch.done.push(s);  // cannot fail: every slot is in at most one ring
      // The consumer sleeps for one slot: woken for it alone, not for each batch that comes
      // before its turn (SegmentView::awaited_slot says why this is enough).
      shared_memory_fence();
      if (view.awaited_slot().load(std::memory_order_relaxed) == std::uint64_t{s} + 1) {
        std::uint64_t one = 1;
        while (::write(ctx.done_event, &one, sizeof one) < 0 && errno == EINTR) {
        }
      }
    }
  }
}

}  // namespace stoker::detail
