#include "loader/worker.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

#include "stoker/error.h"

namespace stoker::detail {
namespace {

std::uint64_t cpu_ns() noexcept {
  timespec ts;
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::string describe(const Schema& s) { return fmt::format("{} samples of {}", s.num_samples, s.describe_fields()); }

}  // namespace

formats::Reader& LazyReader::get() {
  if (!reader_) {
    auto r = formats::open_reader(path_, options_);
    if (!(r->schema() == expected_)) {
      throw Error(fmt::format("{}: the dataset changed after the loader opened it (was {}, now {})", path_,
                              describe(expected_), describe(r->schema())));
    }
    reader_ = std::move(r);
  }
  return *reader_;
}

void fill_slot(const SegmentView& view, std::uint32_t s, LazyReader& reader, const std::string& who) noexcept {
  SlotHeader& h = view.slot_header(s);
  auto t0 = std::chrono::steady_clock::now();
  try {
    formats::Reader& r = reader.get();
    std::vector<std::byte*> dest(r.schema().fields.size());
    for (std::size_t f = 0; f < dest.size(); ++f) dest[f] = view.slot_field(s, f);
    r.read({view.slot_indices(s), h.num_samples}, dest);
    h.status = static_cast<std::uint32_t>(SlotStatus::ok);
  } catch (const std::exception& e) {
    view.set_error(s, fmt::format("{}: batch {} of epoch {}: {}", who, h.batch_index, h.epoch, e.what()));
    h.status = static_cast<std::uint32_t>(SlotStatus::error);
  } catch (...) {
    view.set_error(s, fmt::format("{}: batch {} of epoch {}: unknown exception", who, h.batch_index, h.epoch));
    h.status = static_cast<std::uint32_t>(SlotStatus::error);
  }
  h.busy_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
}

void read_ahead(const SegmentView& view, std::uint32_t s, LazyReader& reader) noexcept {
  formats::Reader* r = reader.opened();
  if (!r || r->schema().bytes_per_sample() < kReadAheadMinSampleBytes) return;
  r->will_need({view.slot_indices(s), view.slot_header(s).num_samples});
}

void run_worker(const WorkerContext& ctx) {
  const std::string who = fmt::format("worker {} (pid {})", ctx.worker, ::getpid());
  WorkerChannel ch = ctx.view.channel(ctx.worker);
  LazyReader reader(ctx.path, ctx.reader_options, ctx.expected);
  std::uint64_t advised = 0;  // ring positions below this were read ahead
  for (;;) {
    pollfd fds[2] = {{ctx.task_event, POLLIN, 0}, {ctx.lifeline, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;  // the trainer is gone
    std::uint64_t count;
    if (::read(ctx.task_event, &count, sizeof count) < 0 && errno != EAGAIN) return;
    std::uint32_t s;
    for (;;) {
      // Large samples not in the page cache: the storage reads of every batch queued for this
      // worker run while the first is copied.
      const std::uint64_t queued = ch.tasks.write_position();
      for (std::uint64_t p = std::max(advised, ch.tasks.read_position()); p < queued; ++p) {
        const std::uint32_t t = ch.tasks.item_at(p);
        if (t != kStopWorker) read_ahead(ctx.view, t, reader);
      }
      advised = std::max(advised, queued);
      if (!ch.tasks.pop(s)) break;
      if (s == kStopWorker) return;
      ctx.view.slot_header(s).worker = ctx.worker;
      fill_slot(ctx.view, s, reader, who);
      ch.cpu_ns->store(cpu_ns(), std::memory_order_relaxed);
      ch.done.push(s);  // cannot fail: every slot is in at most one ring
      std::uint64_t one = 1;
      while (::write(ctx.done_event, &one, sizeof one) < 0 && errno == EINTR) {
      }
    }
  }
}

}  // namespace stoker::detail
