#include "loader/device_feeder.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <iostream>
#include <mutex>

#include "loader/batch_owner.h"
#include "loader/device_backend.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }
using Clock = std::chrono::steady_clock;

}  // namespace

// The device buffers, the queue of staged batches and the measurements; shared by the feeder and
// every device Batch (which may outlive the Loader). mu guards everything below it.
class DeviceBufferPool final : public BatchOwner, public std::enable_shared_from_this<DeviceBufferPool> {
 public:
  struct Buffer {
    std::byte* device = nullptr;
    EventHandle ready = nullptr;                   // the copy into it landed
    EventHandle copy_start = nullptr, copy_end = nullptr;  // timing of that copy
    bool copy_timed = false;                       // copy_start/end recorded and not yet harvested
    std::vector<StreamHandle> streams;             // recorded while held
    std::vector<EventHandle> release_events;       // recorded on those streams at release
    std::vector<std::uint64_t> indices;
    bool held = false;
  };
  struct Item {
    std::uint64_t generation = 0;
    std::optional<Batch> batch;
    std::exception_ptr error;
    bool end = false;
  };
  // One step boundary on a compute stream: `from` (the previous batch's release there, if any),
  // `before` (ready_on was called), `after` (the batch's copy had landed). The stream did no
  // useful work between `from` and `after`: the host had not yet handed it the next batch, or the
  // stream waited for the copy.
  struct StepMark {
    EventHandle from, before, after;
  };

  DeviceBufferPool(std::unique_ptr<DeviceBackend> backend, const Schema& schema, std::size_t batch_size,
                   std::size_t count)
      : schema_(schema), backend_(std::move(backend)) {
    std::size_t off = 0;
    for (const auto& f : schema_.fields) {
      offsets_.push_back(off);
      off = align_up(off + f.bytes_per_sample() * batch_size);
    }
    buffer_bytes_ = std::max<std::size_t>(off, kAlign);
    DeviceBackend& be = *backend_;
    copy_stream = be.create_stream();
    buffers.resize(count);
    for (std::uint32_t i = 0; i < count; ++i) {
      Buffer& b = buffers[i];
      b.device = be.alloc_device(buffer_bytes_);
      b.ready = be.create_event(false);
      b.copy_start = be.create_event(true);
      b.copy_end = be.create_event(true);
      free_list.push_back(static_cast<std::uint32_t>(count - 1 - i));
    }
  }

  ~DeviceBufferPool() override {
    DeviceBackend& be = *backend_;
    for (Buffer& b : buffers) {
      for (EventHandle e : b.release_events) be.destroy_event(e);
      if (b.ready) be.synchronize(b.ready);
      for (EventHandle e : {b.ready, b.copy_start, b.copy_end}) {
        if (e) be.destroy_event(e);
      }
      if (b.device) be.free_device(b.device);
    }
    for (const StepMark& m : marks) {
      if (m.from) be.destroy_event(m.from);
      be.destroy_event(m.before);
      be.destroy_event(m.after);
    }
    for (auto& [stream, e] : release_marks) be.destroy_event(e);
    for (EventHandle e : {first_before_, last_after_}) {
      if (e) be.destroy_event(e);
    }
    if (copy_stream) be.destroy_stream(copy_stream);
  }

  DeviceBackend& backend() { return *backend_; }
  std::size_t offset(std::size_t f) const { return offsets_[f]; }
  std::size_t buffer_bytes() const { return buffer_bytes_; }
  const Schema& schema() const { return schema_; }

  void release(std::uint32_t id) noexcept override {
    std::lock_guard lock(mu);
    Buffer& b = buffers[id];
    try {
      for (StreamHandle s : b.streams) {
        EventHandle e = backend_->create_event(false);
        backend_->record(e, s);
        b.release_events.push_back(e);
        // When the work queued on `s` so far is done: the start of an idle gap, if one follows.
        EventHandle mark = backend_->create_event(true);
        backend_->record(mark, s);
        EventHandle& slot = release_marks[s];
        if (slot) backend_->destroy_event(slot);
        slot = mark;
      }
    } catch (const std::exception& e) {
      std::cerr << "stoker: warning: " << e.what() << std::endl;
    }
    b.streams.clear();
    b.held = false;
    --held;
    free_list.push_back(id);
    cv.notify_all();
  }

  void record_stream(std::uint32_t id, void* stream) override {
    std::lock_guard lock(mu);
    auto& s = buffers[id].streams;
    if (std::find(s.begin(), s.end(), stream) == s.end()) s.push_back(stream);
  }

  void ready_on(std::uint32_t id, void* stream) override {
    DeviceBackend& be = *backend_;
    EventHandle before = be.create_event(true), after = be.create_event(true);
    be.record(before, stream);
    be.stream_wait(stream, buffers[id].ready);  // `ready` is only re-recorded after release
    be.record(after, stream);
    record_stream(id, stream);
    std::lock_guard lock(mu);
    EventHandle from = nullptr;
    if (auto it = release_marks.find(stream); it != release_marks.end()) {
      from = it->second;
      release_marks.erase(it);
    }
    marks.push_back({from, before, after});
  }

  // Staging thread, outside mu: a device Batch for buffer `id`, whose indices are already set.
  Batch make_batch(std::uint32_t id, std::uint64_t epoch, std::uint64_t index, const std::vector<FieldView>& fields) {
    Buffer& b = buffers[id];
    Batch out;
    out.slot_ = id;
    out.epoch_ = epoch;
    out.index_ = index;
    out.indices_ = b.indices;
    out.device_ = backend_->device();
    out.ready_event_ = b.ready;
    for (std::size_t f = 0; f < schema_.fields.size(); ++f) {
      FieldView v = fields[f];
      v.name = schema_.fields[f].name;
      v.device = backend_->device();
      v.data = b.device + offsets_[f];
      out.fields_.push_back(std::move(v));
    }
    {
      std::lock_guard lock(mu);
      b.held = true;
      ++held;
    }
    out.owner_ = shared_from_this();
    return out;
  }

  // Folds completed measurements into the counters. REQUIRES: mu held.
  void harvest() {
    DeviceBackend& be = *backend_;
    while (!marks.empty() && be.query(marks.front().after)) {
      StepMark m = marks.front();
      marks.pop_front();
      gpu_wait_seconds += std::max(0.0, be.elapsed_seconds(m.from ? m.from : m.before, m.after));
      if (m.from) be.destroy_event(m.from);
      ++gpu_steps;
      if (!first_before_) {
        first_before_ = m.before;
      } else {
        be.destroy_event(m.before);
      }
      if (last_after_) be.destroy_event(last_after_);
      last_after_ = m.after;
      gpu_span_seconds = be.elapsed_seconds(first_before_, last_after_);
    }
  }

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Buffer> buffers;
  std::vector<std::uint32_t> free_list;
  std::size_t held = 0;
  std::deque<Item> queue;
  std::optional<std::pair<std::uint64_t, std::uint64_t>> request;  // (epoch, start batch)
  std::uint64_t generation = 0;  // of the newest request
  bool active = false;           // the staging thread has an epoch to stage
  bool staging = false;          // the staging thread holds a buffer it is filling
  bool stop = false;
  std::deque<StepMark> marks;
  std::map<StreamHandle, EventHandle> release_marks;  // the last release on each stream, not yet used
  StreamHandle copy_stream = nullptr;
  std::uint64_t h2d_bytes = 0;
  double h2d_seconds = 0, gpu_wait_seconds = 0, gpu_span_seconds = 0, user_wait_seconds = 0;
  std::uint64_t gpu_steps = 0;

 private:
  Schema schema_;
  std::vector<std::size_t> offsets_;
  std::size_t buffer_bytes_ = 0;
  EventHandle first_before_ = nullptr, last_after_ = nullptr;
  std::unique_ptr<DeviceBackend> backend_;
};

struct DeviceFeeder::Pinned {
  void* host = nullptr;
  EventHandle copied = nullptr;
  bool used = false;
};

struct DeviceFeeder::Pending {
  Batch host;
  EventHandle copied = nullptr;
};

DeviceFeeder::DeviceFeeder(const Options& options, const Schema& schema, HostSource& source)
    : options_(options), source_(source), staging_(options.staging) {
  if (options.prefetch_to_device == 0) throw Error("options: prefetch_to_device is 0; it must be at least 1");
  auto backend = make_device_backend(options.device);
  pool_ = std::make_shared<DeviceBufferPool>(std::move(backend), schema, options.batch_size,
                                             options.prefetch_to_device + 1);
  DeviceBackend& be = pool_->backend();
  if (staging_ == Staging::registered_shm) {
    registered_ = be.register_host(source.slot_memory(), source.slot_memory_bytes());
    if (!registered_) {
      const char* message = "cannot page-lock the shared-memory slots; staging through pinned buffers instead";
      if (options.on_warning) {
        options.on_warning(message);
      } else {
        std::cerr << "stoker: warning: " << message << std::endl;
      }
      staging_ = Staging::pinned_copy;
    }
  }
  if (staging_ == Staging::pinned_copy) {
    for (int i = 0; i < 2; ++i) {  // double buffering: fill one while the other is copied
      auto p = std::make_unique<Pinned>();
      p->host = be.alloc_pinned(pool_->buffer_bytes());
      p->copied = be.create_event(false);
      pinned_.push_back(std::move(p));
    }
  }
  thread_ = std::thread([this] { run(); });
}

DeviceFeeder::~DeviceFeeder() {
  {
    std::lock_guard lock(pool_->mu);
    pool_->stop = true;
  }
  pool_->cv.notify_all();
  source_.interrupt();  // the staging thread may be waiting for a worker that never delivers
  thread_.join();
  std::deque<DeviceBufferPool::Item> queued;
  {
    std::lock_guard lock(pool_->mu);
    queued.swap(pool_->queue);
  }
  queued.clear();  // outside the lock: releasing a batch takes it
  DeviceBackend& be = pool_->backend();
  for (auto& p : pending_) {
    be.synchronize(p->copied);
    be.destroy_event(p->copied);
  }
  pending_.clear();
  for (auto& p : pinned_) {
    be.synchronize(p->copied);
    be.destroy_event(p->copied);
    be.free_pinned(p->host);
  }
  if (registered_) be.unregister_host(source_.slot_memory());
}

void DeviceFeeder::run() noexcept {
  try {
    pool_->backend().bind_thread();
    stage_loop();
  } catch (...) {
    // Reported to the user at their next call.
    std::lock_guard lock(pool_->mu);
    pool_->queue.push_back({pool_->generation, std::nullopt, std::current_exception(), false});
    pool_->active = false;
    pool_->cv.notify_all();
  }
}

void DeviceFeeder::release_copied(bool wait_for_one) {
  DeviceBackend& be = pool_->backend();
  if (wait_for_one && !pending_.empty()) be.synchronize(pending_.front()->copied);
  while (!pending_.empty() && be.query(pending_.front()->copied)) {
    be.destroy_event(pending_.front()->copied);
    pending_.erase(pending_.begin());  // releases the slot
  }
}

void DeviceFeeder::stage_loop() {
  DeviceBufferPool& p = *pool_;
  std::uint64_t generation = 0, source_generation = 0;
  std::unique_lock lock(p.mu);
  for (;;) {
    p.cv.wait(lock, [&] {
      return p.stop || p.request ||
             (p.active && p.queue.size() < options_.prefetch_to_device && !p.free_list.empty());
    });
    if (p.stop) return;
    if (p.request) {
      auto [epoch, start] = *p.request;
      p.request.reset();
      generation = p.generation;
      p.active = true;  // from here on, next() waits for this epoch's batches
      lock.unlock();
      std::exception_ptr error;
      try {
        release_copied(false);
        source_generation = source_.start_host_epoch(epoch, start);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error) {
        p.queue.push_back({generation, std::nullopt, error, false});
        p.cv.notify_all();
      }
      if (generation == p.generation) p.active = !error;
      continue;
    }
    const std::uint32_t buffer = p.free_list.back();
    p.free_list.pop_back();
    p.staging = true;
    lock.unlock();

    DeviceBufferPool::Item item{generation, std::nullopt, nullptr, false};
    try {
      if (registered_) release_copied(pending_.size() + 1 >= source_.depth());
      std::optional<Batch> host = source_.next_host(source_generation);
      if (host) {
        item.batch = stage(std::move(*host), buffer);
      } else {
        item.end = true;
      }
    } catch (...) {
      item.error = std::current_exception();
    }

    lock.lock();
    p.staging = false;
    if (!item.batch) p.free_list.push_back(buffer);
    if (item.end) p.active = false;
    if (generation == p.generation) {
      p.queue.push_back(std::move(item));
    } else {
      lock.unlock();
      item = {};  // a batch of an abandoned epoch: release outside the lock
      lock.lock();
    }
    p.cv.notify_all();
  }
}

Batch DeviceFeeder::stage(Batch host, std::uint32_t id) {
  DeviceBufferPool& p = *pool_;
  DeviceBackend& be = p.backend();
  DeviceBufferPool::Buffer& b = p.buffers[id];
  std::vector<EventHandle> release_events;
  bool harvest_copy = false;
  {
    std::lock_guard lock(p.mu);
    release_events.swap(b.release_events);
    harvest_copy = b.copy_timed && be.query(b.copy_end);
    if (harvest_copy) p.h2d_seconds += be.elapsed_seconds(b.copy_start, b.copy_end);
    b.copy_timed = false;
  }
  // The copy stream waits, on the device, for the work the user queued on this buffer.
  for (EventHandle e : release_events) {
    be.stream_wait(p.copy_stream, e);
    be.destroy_event(e);
  }
  std::size_t bytes = 0;
  for (const auto& f : host.fields()) bytes += f.bytes;
  const std::vector<FieldView> fields(host.fields().begin(), host.fields().end());
  const std::uint64_t epoch = host.epoch(), index = host.index();
  b.indices.assign(host.indices().begin(), host.indices().end());
  be.record(b.copy_start, p.copy_stream);
  if (staging_ == Staging::pinned_copy) {
    Pinned& pin = *pinned_[next_pinned_];
    next_pinned_ = (next_pinned_ + 1) % pinned_.size();
    if (pin.used) be.synchronize(pin.copied);  // its previous copy must have left the buffer
    auto* dst = static_cast<std::byte*>(pin.host);
    std::size_t end = 0;
    for (std::size_t f = 0; f < host.fields().size(); ++f) {
      const FieldView& v = host.fields()[f];
      std::memcpy(dst + p.offset(f), v.data, v.bytes);
      end = p.offset(f) + v.bytes;
    }
    host.release();  // the slot goes back to the workers now
    be.copy_to_device_async(b.device, dst, end, p.copy_stream);
    be.record(pin.copied, p.copy_stream);
    pin.used = true;
  } else {
    for (std::size_t f = 0; f < host.fields().size(); ++f) {
      const FieldView& v = host.fields()[f];
      be.copy_to_device_async(b.device + p.offset(f), v.data, v.bytes, p.copy_stream);
    }
    auto pending = std::make_unique<Pending>();
    pending->copied = be.create_event(false);
    be.record(pending->copied, p.copy_stream);
    pending->host = std::move(host);  // the slot is held until its copy completed
    pending_.push_back(std::move(pending));
  }
  be.record(b.ready, p.copy_stream);
  be.record(b.copy_end, p.copy_stream);
  {
    std::lock_guard lock(p.mu);
    b.copy_timed = true;
    p.h2d_bytes += bytes;
    p.harvest();  // keeps the step marks from piling up when nobody asks for stats
  }
  // Last: once the Batch exists, its destruction returns the buffer.
  return p.make_batch(id, epoch, index, fields);
}

std::uint64_t DeviceFeeder::start_epoch(std::uint64_t epoch, std::uint64_t start_batch) {
  std::deque<DeviceBufferPool::Item> stale;
  std::uint64_t generation;
  {
    std::lock_guard lock(pool_->mu);
    generation = ++pool_->generation;
    pool_->request = {epoch, start_batch};
    pool_->active = false;
    stale.swap(pool_->queue);
  }
  pool_->cv.notify_all();
  return generation;  // `stale` is released here, outside the lock
}

std::optional<Batch> DeviceFeeder::next(std::uint64_t generation) {
  DeviceBufferPool& p = *pool_;
  std::optional<DeviceBufferPool::Item> item;
  std::deque<DeviceBufferPool::Item> stale;
  const auto t0 = Clock::now();
  {
    std::unique_lock lock(p.mu);
    if (generation != p.generation) {
      throw Error("stoker: this epoch was ended by a later call to Loader::epoch(); iterate the newest one");
    }
    for (;;) {
      while (!p.queue.empty() && p.queue.front().generation != generation) {
        stale.push_back(std::move(p.queue.front()));
        p.queue.pop_front();
      }
      if (!p.queue.empty()) {
        item = std::move(p.queue.front());
        p.queue.pop_front();
        break;
      }
      if (!p.active && !p.request && !p.staging) return std::nullopt;  // the epoch is over
      if (p.held == p.buffers.size()) {
        throw Error(fmt::format(
            "stoker: all {} device buffers are held by live stoker::Batch objects, so no batch can be staged: "
            "destroy or release() the batches you no longer need, copy what you want to keep (e.g. "
            "stoker::copy_to_tensors), or raise Options::prefetch_to_device",
            p.buffers.size()));
      }
      p.cv.wait(lock);
    }
    p.user_wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    p.cv.notify_all();  // room in the queue
  }
  stale.clear();
  if (item->error) std::rethrow_exception(item->error);
  if (item->end) return std::nullopt;
  return std::move(item->batch);
}

void DeviceFeeder::add_stats(Stats& s) const {
  std::lock_guard lock(pool_->mu);
  pool_->harvest();
  s.wait_seconds = pool_->user_wait_seconds;
  s.h2d_bytes = pool_->h2d_bytes;
  s.h2d_seconds = pool_->h2d_seconds;
  s.gpu_wait_seconds = pool_->gpu_wait_seconds;
  s.gpu_span_seconds = pool_->gpu_span_seconds;
  s.gpu_steps = pool_->gpu_steps;
  s.staging = staging_;
}

}  // namespace stoker::detail
