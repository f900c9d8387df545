// GpuIdleMeter: how long compute streams sat idle waiting for data, measured on the device.
//
// One step boundary on a compute stream is three events: `from` (the previous batch's release on
// that stream: its step's work was queued before it), `before` (Batch::ready_on was called) and
// `after` (the stream may use the batch: its copy had landed). Between `from` and `after` the
// stream did nothing useful: the host had not handed it the next batch yet, or it waited for the
// copy. Host timers see only the first. Events are folded into the totals once they completed, so
// nothing here waits. Thread-safe (its own mutex); owns every event it was given.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>

#include "loader/device/device_backend.h"
#include "loader/device/device_timeline.h"
#include "loader/device/device_trace.h"

namespace stoker::detail {

class GpuIdleMeter {
 public:
  explicit GpuIdleMeter(DeviceBackend& backend) : backend_(backend) {}
  ~GpuIdleMeter();
  GpuIdleMeter(const GpuIdleMeter&) = delete;
  GpuIdleMeter& operator=(const GpuIdleMeter&) = delete;

  // A batch was released on `stream`: records the start of a possible idle gap there.
  void released_on(StreamHandle stream);
  // Batch::ready_on(stream) for a batch whose copy completes at `ready`; makes `stream` wait.
  void ready_on(StreamHandle stream, EventHandle ready);

  struct Totals {
    double wait_seconds = 0;  // idle between steps
    double span_seconds = 0;  // stream time covered by the measured steps
    std::uint64_t steps = 0;
  };
  // Folds completed measurements in and returns the totals.
  Totals totals();
  // From now on, each gap folded in is also a span on `trace`'s idle track, placed by `timeline`
  // (both outlive the meter, or are unset first; nullptr: none).
  void set_trace(DeviceTrace* trace, DeviceTimeline* timeline);

 private:
  struct StepMark {
    EventHandle from, before, after;
  };
  void harvest();  // REQUIRES: mu_ held

  DeviceBackend& backend_;
  std::mutex mu_;
  std::deque<StepMark> marks_;
  std::map<StreamHandle, EventHandle> release_marks_;  // the last release on each stream, not yet used
  EventHandle first_before_ = nullptr, last_after_ = nullptr;
  Totals totals_;
  DeviceTrace* trace_ = nullptr;
  DeviceTimeline* timeline_ = nullptr;
};

}  // namespace stoker::detail
