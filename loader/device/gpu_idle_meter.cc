#include "loader/device/gpu_idle_meter.h"

#include <algorithm>

namespace stoker::detail {

GpuIdleMeter::~GpuIdleMeter() {
  for (const StepMark& m : marks_) {
    if (m.from) backend_.destroy_event(m.from);
    backend_.destroy_event(m.before);
    backend_.destroy_event(m.after);
  }
  for (auto& [stream, e] : release_marks_) backend_.destroy_event(e);
  for (EventHandle e : {first_before_, last_after_}) {
    if (e) backend_.destroy_event(e);
  }
}

void GpuIdleMeter::released_on(StreamHandle stream) {
  EventHandle mark = backend_.create_event(true);
  backend_.record(mark, stream);
  std::lock_guard lock(mu_);
  EventHandle& slot = release_marks_[stream];
  if (slot) backend_.destroy_event(slot);
  slot = mark;
}

void GpuIdleMeter::ready_on(StreamHandle stream, EventHandle ready) {
  EventHandle before = backend_.create_event(true), after = backend_.create_event(true);
  backend_.record(before, stream);
  backend_.stream_wait(stream, ready);
  backend_.record(after, stream);
  std::lock_guard lock(mu_);
  EventHandle from = nullptr;
  if (auto it = release_marks_.find(stream); it != release_marks_.end()) {
    from = it->second;
    release_marks_.erase(it);
  }
  marks_.push_back({from, before, after});
  harvest();  // keeps the marks from piling up when nobody asks for stats
}

void GpuIdleMeter::harvest() {
  while (!marks_.empty() && backend_.query(marks_.front().after)) {
    StepMark m = marks_.front();
    marks_.pop_front();
    EventHandle gap_from = m.from ? m.from : m.before;
    const double gap = std::max(0.0, backend_.elapsed_seconds(gap_from, m.after));
    totals_.wait_seconds += gap;
    if (trace_ && gap > 0) {
      trace_->span(DeviceTrace::Track::idle, "waits for data", timeline_->at(gap_from),
                   std::chrono::duration_cast<DeviceTrace::Clock::duration>(std::chrono::duration<double>(gap)), "");
    }
    if (m.from) backend_.destroy_event(m.from);
    ++totals_.steps;
    if (!first_before_) {
      first_before_ = m.before;
    } else {
      backend_.destroy_event(m.before);
    }
    if (last_after_) backend_.destroy_event(last_after_);
    last_after_ = m.after;
    totals_.span_seconds = backend_.elapsed_seconds(first_before_, last_after_);
  }
}

void GpuIdleMeter::set_trace(DeviceTrace* trace, DeviceTimeline* timeline) {
  std::lock_guard lock(mu_);
  trace_ = trace;
  timeline_ = timeline;
}

GpuIdleMeter::Totals GpuIdleMeter::totals() {
  std::lock_guard lock(mu_);
  harvest();
  return totals_;
}

}  // namespace stoker::detail
