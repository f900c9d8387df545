#include "loader/device/device_feeder.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>

#include "loader/device/device_backend.h"
#include "loader/device/device_buffer_pool.h"
#include "loader/device/staged_queue.h"
#include "loader/device/stager_factory.h"
#include "stoker/error.h"

namespace stoker::detail {

DeviceFeeder::DeviceFeeder(const Options& options, const Schema& schema, HostSource& source, DeviceTrace* trace)
    : source_(source), trace_(trace) {
  if (options.prefetch_to_device == 0)
    throw Error(ErrorCode::invalid_option, "options: prefetch_to_device is 0; it must be at least 1");
  // The queue, plus the batches in the user's hands: at least the one being used while the next is
  // staged.
  pool_ =
      std::make_shared<DeviceBufferPool>(make_device_backend(options.device), schema, options.batch_size,
                                         options.prefetch_to_device + std::max<std::size_t>(1, options.held_batches));
  queue_ = std::make_shared<StagedQueue>(options.prefetch_to_device);
  pool_->set_on_free([weak = std::weak_ptr<StagedQueue>(queue_)] {
    if (auto q = weak.lock()) q->notify();  // batches may outlive the feeder
  });
  auto warn = [&](const std::string& message) {
    if (options.on_warning) {
      options.on_warning(message);
    } else {
      std::cerr << "stoker: warning: " << message << std::endl;
    }
  };
  stager_ = make_stager(options.staging, *pool_, source.slot_memory(), source.slot_memory_bytes(), warn);
  if (trace_) pool_->set_trace(trace_);
  thread_ = std::thread([this] { run(); });
}

DeviceFeeder::~DeviceFeeder() {
  queue_->stop();
  source_.interrupt();  // the staging thread may be waiting for a worker that never delivers
  thread_.join();
  std::deque<StagedQueue::Item> queued;
  queue_->request(0, 0, 0, queued);  // takes what is still queued, to be released here
  queued.clear();
  stager_.reset();                        // waits for its copies, releases its slots
  if (trace_) pool_->set_trace(nullptr);  // batches may outlive the trace
}

void DeviceFeeder::run() noexcept {
  try {
    pool_->backend().bind_thread();
    stage_loop();
  } catch (...) {
    // Raised at the user's next call, and every one after: nothing more is staged.
    queue_->fail(std::current_exception());
  }
}

void DeviceFeeder::stage_loop() {
  std::uint64_t source_generation = 0;
  for (;;) {
    StagedQueue::Work work = queue_->next_work([&] { return pool_->has_free(); });
    if (work.kind == StagedQueue::Work::stop) return;
    if (work.kind == StagedQueue::Work::start_epoch) {
      std::exception_ptr error;
      try {
        stager_->reclaim(false);
        source_generation = source_.start_host_epoch(work.epoch, work.start_batch, work.skip);
      } catch (...) {
        error = std::current_exception();
      }
      queue_->started(work.generation, error);
      continue;
    }
    const std::optional<std::uint32_t> buffer = pool_->try_acquire();  // only this thread acquires
    StagedQueue::Item item{work.generation, std::nullopt, nullptr, false};
    try {
      // Registered slots stay held until copied: keep one free for the workers.
      stager_->reclaim(stager_->slots_held() + 1 >= source_.depth());
      std::optional<Batch> host = source_.next_host(source_generation);
      if (host) {
        item.batch = stage(std::move(*host), *buffer);
      } else {
        item.end = true;
      }
    } catch (...) {
      item.error = std::current_exception();
    }
    if (!item.batch) pool_->give_back(*buffer);
    std::deque<StagedQueue::Item> abandoned;
    queue_->push(std::move(item), abandoned);
    if (!abandoned.empty()) {
      abandoned.clear();  // outside the queue's lock: releasing a batch frees its buffer, which notifies
      queue_->abandoned_released();
    }
  }
}

Batch DeviceFeeder::stage(Batch host, std::uint32_t id) {
  std::uint64_t bytes = 0;
  for (const auto& f : host.fields()) bytes += f.bytes;
  const std::vector<FieldView> fields(host.fields().begin(), host.fields().end());
  const std::vector<std::uint64_t> indices(host.indices().begin(), host.indices().end());
  const std::vector<std::uint32_t> skipped(host.skipped().begin(), host.skipped().end());
  const std::uint64_t epoch = host.epoch(), index = host.index();
  const auto from = std::chrono::steady_clock::now();
  pool_->begin_copy(id);
  stager_->copy(std::move(host), id);
  pool_->end_copy(id, bytes, index);
  if (trace_) {
    trace_->span(DeviceTrace::Track::staging, fmt::format("stage: batch {}", index), from,
                 std::chrono::steady_clock::now() - from, fmt::format(R"("batch":{},"bytes":{})", index, bytes));
  }
  return pool_->make_batch(id, epoch, index, indices, fields, skipped);
}

std::uint64_t DeviceFeeder::start_epoch(std::uint64_t epoch, std::uint64_t start_batch, std::uint64_t skip) {
  std::deque<StagedQueue::Item> stale;
  return queue_->request(epoch, start_batch, skip, stale);  // `stale` is released here, outside the lock
}

std::optional<Batch> DeviceFeeder::next(std::uint64_t generation) {
  std::deque<StagedQueue::Item> stale;
  std::optional<StagedQueue::Item> item = queue_->pop(
      generation, pool_->size(), [&] { return pool_->all_held(); }, stale);
  stale.clear();
  if (!item) return std::nullopt;
  if (item->error) std::rethrow_exception(item->error);
  if (item->end) return std::nullopt;
  return std::move(item->batch);
}

bool DeviceFeeder::wait_ready(std::uint64_t generation, std::chrono::steady_clock::time_point until) {
  return queue_->wait_ready(
      generation, [&] { return pool_->all_held(); }, until);
}

void DeviceFeeder::add_stats(Stats& s) const {
  const GpuIdleMeter::Totals idle = pool_->idle_meter().totals();
  const DeviceBufferPool::CopyTotals copies = pool_->copy_totals();
  s.wait_seconds = queue_->user_wait_seconds();
  s.h2d_bytes = copies.bytes;
  s.h2d_seconds = copies.seconds;
  s.gpu_wait_seconds = idle.wait_seconds;
  s.gpu_span_seconds = idle.span_seconds;
  s.gpu_steps = idle.steps;
  s.staging = stager_->kind();
}

}  // namespace stoker::detail
