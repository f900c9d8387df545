// DeviceTimeline: device events placed on the host's clock, for the trace (loader/trace_writer.h).
// An event is recorded on a stream and waited for, and the host's time taken then; a later timing
// event's host time is that time plus the device's elapsed time between the two (the device's own
// clock: a copy's span is when the copy engine ran it, not when the host queued it). The device
// reports elapsed times as float milliseconds, whose steps grow with the span (4 µs after a
// minute), and its clock drifts from the host's: the origin is taken again every 30 s
// (refresh()), so positions stay within a few microseconds. Thread-safe.
#pragma once

#include <chrono>
#include <mutex>

#include "loader/device/device_backend.h"

namespace stoker::detail {

class DeviceTimeline {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kRefresh{30};
  // Records and waits for the origin on `stream`; throws the backend's errors.
  DeviceTimeline(DeviceBackend& backend, StreamHandle stream);
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  // When `e` (a timing event, completed) happened, on the host's clock.
  Clock::time_point at(EventHandle e);
  // Takes a new origin on `stream` (waiting for what is queued there) once kRefresh has passed
  // since the last. The thread that queues work on `stream`; throws the backend's errors.
  void refresh(StreamHandle stream);

 private:
  DeviceBackend& backend_;
  std::mutex mu_;
  EventHandle origin_ = nullptr;  // mu_
  Clock::time_point host_;        // mu_
};

}  // namespace stoker::detail
