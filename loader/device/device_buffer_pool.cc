#include "loader/device/device_buffer_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <utility>

#include "loader/batch/batch_builder.h"

namespace stoker::detail {
namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

}  // namespace

DeviceBufferPool::DeviceBufferPool(std::unique_ptr<DeviceBackend> backend, const Schema& schema, std::size_t batch_size,
                                   std::size_t count)
    : backend_(std::move(backend)), meter_(std::make_unique<GpuIdleMeter>(*backend_)), schema_(schema) {
  std::size_t off = 0;
  for (const auto& f : schema_.fields) {
    offsets_.push_back(off);
    off = align_up(off + f.bytes_per_sample() * batch_size);
  }
  buffer_bytes_ = std::max<std::size_t>(off, kAlign);
  buffers_.resize(count);
  try {
    copy_stream_ = backend_->create_stream();
    for (Buffer& b : buffers_) {
      b.device = backend_->alloc_device(buffer_bytes_);
      b.ready = backend_->create_event(false);
      b.copy_start = backend_->create_event(true);
      b.copy_end = backend_->create_event(true);
    }
  } catch (...) {
    destroy();  // no destructor runs for a throwing constructor
    throw;
  }
  for (std::uint32_t i = static_cast<std::uint32_t>(count); i-- > 0;) free_list_.push_back(i);
}

DeviceBufferPool::~DeviceBufferPool() { destroy(); }

void DeviceBufferPool::destroy() noexcept {
  DeviceBackend& be = *backend_;
  meter_.reset();
  timeline_.reset();
  for (Buffer& b : buffers_) {
    for (EventHandle e : b.release_events) be.destroy_event(e);
    b.release_events.clear();
    try {
      if (b.ready) be.synchronize(b.ready);  // no copy may still write into freed memory
    } catch (const std::exception& e) {
      std::cerr << "stoker: warning: " << e.what() << std::endl;
    }
    for (EventHandle* e : {&b.ready, &b.copy_start, &b.copy_end}) {
      if (*e) be.destroy_event(std::exchange(*e, nullptr));
    }
    if (b.device) be.free_device(std::exchange(b.device, nullptr));
  }
  if (copy_stream_) be.destroy_stream(std::exchange(copy_stream_, nullptr));
}

std::optional<std::uint32_t> DeviceBufferPool::try_acquire() {
  std::lock_guard lock(mu_);
  if (free_list_.empty()) return std::nullopt;
  std::uint32_t id = free_list_.back();
  free_list_.pop_back();
  buffers_[id].free = false;
  return id;
}

void DeviceBufferPool::give_back(std::uint32_t id) {
  {
    std::lock_guard lock(mu_);
    buffers_[id].free = true;
    free_list_.push_back(id);
  }
  if (on_free_) on_free_();
}

bool DeviceBufferPool::has_free() const {
  std::lock_guard lock(mu_);
  return !free_list_.empty();
}

bool DeviceBufferPool::all_held() const {
  std::lock_guard lock(mu_);
  return held_ == buffers_.size();
}

void DeviceBufferPool::begin_copy(std::uint32_t id) {
  Buffer& b = buffers_[id];
  // Before the copy stream waits for the user's work: a new origin waits only for queued copies.
  if (timeline_) timeline_->refresh(copy_stream_);
  // The buffer's last copy landed before its batch was used (`ready`); the end of its timing,
  // recorded just after, is waited for (at once, in practice), so that every copy is counted.
  if (b.copy_timed) backend_->synchronize(b.copy_end);
  std::vector<EventHandle> release_events;
  {
    std::lock_guard lock(mu_);
    release_events.swap(b.release_events);
    harvest_copy(b);
    b.copy_timed = false;
  }
  // The copy stream waits, on the device, for the work the user queued on this buffer.
  for (EventHandle e : release_events) {
    backend_->stream_wait(copy_stream_, e);
    backend_->destroy_event(e);
  }
  backend_->record(b.copy_start, copy_stream_);
}

void DeviceBufferPool::end_copy(std::uint32_t id, std::uint64_t bytes, std::uint64_t index) {
  Buffer& b = buffers_[id];
  backend_->record(b.ready, copy_stream_);
  backend_->record(b.copy_end, copy_stream_);
  std::lock_guard lock(mu_);
  b.copy_timed = true;
  b.copied_batch = index;
  b.copied_bytes = bytes;
  copies_.bytes += bytes;
}

void DeviceBufferPool::harvest_copy(Buffer& b) {
  if (!b.copy_timed || !backend_->query(b.copy_end)) return;
  const double seconds = backend_->elapsed_seconds(b.copy_start, b.copy_end);
  copies_.seconds += seconds;
  b.copy_timed = false;
  if (trace_) {
    trace_->span(DeviceTrace::Track::copies, fmt::format("copy: batch {}", b.copied_batch), timeline_->at(b.copy_start),
                 std::chrono::duration_cast<DeviceTrace::Clock::duration>(std::chrono::duration<double>(seconds)),
                 fmt::format(R"("batch":{},"bytes":{})", b.copied_batch, b.copied_bytes));
  }
}

void DeviceBufferPool::set_trace(DeviceTrace* trace) {
  if (trace && !timeline_) timeline_ = std::make_unique<DeviceTimeline>(*backend_, copy_stream_);
  if (!trace) {
    // The staging thread is done: its last copies are waited for, so that each is traced.
    for (Buffer& b : buffers_) {
      try {
        if (b.copy_timed) backend_->synchronize(b.copy_end);
      } catch (const std::exception& e) {
        std::cerr << "stoker: warning: " << e.what() << std::endl;
      }
    }
  }
  {
    std::lock_guard lock(mu_);
    if (!trace) {
      for (Buffer& b : buffers_) harvest_copy(b);
    }
    trace_ = trace;
  }
  meter_->set_trace(trace, timeline_.get());
}

Batch DeviceBufferPool::make_batch(std::uint32_t id, std::uint64_t epoch, std::uint64_t index,
                                   std::span<const std::uint64_t> indices, std::span<const FieldView> host_fields,
                                   std::span<const std::uint32_t> skipped) {
  Buffer& b = buffers_[id];
  b.indices.assign(indices.begin(), indices.end());
  b.skipped.assign(skipped.begin(), skipped.end());
  BatchBuilder::Parts out;
  out.id = id;
  out.epoch = epoch;
  out.index = index;
  out.indices = b.indices;
  out.skipped = b.skipped;
  out.device = backend_->device();
  out.ready_event = b.ready;
  for (std::size_t f = 0; f < schema_.fields.size(); ++f) {
    FieldView v = host_fields[f];
    v.name = schema_.fields[f].name;
    v.device = backend_->device();
    v.data = b.device + offsets_[f];
    out.fields.push_back(std::move(v));
  }
  {
    std::lock_guard lock(mu_);
    ++held_;
  }
  return BatchBuilder::make(shared_from_this(), std::move(out));
}

DeviceBufferPool::CopyTotals DeviceBufferPool::copy_totals() const {
  std::lock_guard lock(mu_);
  return copies_;
}

void DeviceBufferPool::release(std::uint32_t id) noexcept {
  Buffer& b = buffers_[id];
  std::vector<StreamHandle> streams;
  {
    std::lock_guard lock(mu_);
    streams.swap(b.streams);
  }
  std::vector<EventHandle> events;
  try {
    for (StreamHandle s : streams) {
      EventHandle e = backend_->create_event(false);
      backend_->record(e, s);
      events.push_back(e);
      meter_->released_on(s);  // the start of an idle gap, if one follows
    }
  } catch (const std::exception& e) {
    std::cerr << "stoker: warning: " << e.what() << std::endl;
  }
  {
    std::lock_guard lock(mu_);
    b.release_events.insert(b.release_events.end(), events.begin(), events.end());
    b.free = true;
    --held_;
    free_list_.push_back(id);
  }
  if (on_free_) on_free_();
}

void DeviceBufferPool::record_stream(std::uint32_t id, void* stream) {
  std::lock_guard lock(mu_);
  auto& s = buffers_[id].streams;
  if (std::find(s.begin(), s.end(), stream) == s.end()) s.push_back(stream);
}

void DeviceBufferPool::copy_to_host(std::uint32_t id, const std::byte* src, std::byte* dst, std::size_t bytes) {
  backend_->synchronize(buffers_[id].ready);
  if (bytes) backend_->copy_to_host(dst, src, bytes);
}

void DeviceBufferPool::ready_on(std::uint32_t id, void* stream) {
  meter_->ready_on(stream, buffers_[id].ready);  // `ready` is re-recorded only after release
  record_stream(id, stream);
}

}  // namespace stoker::detail
