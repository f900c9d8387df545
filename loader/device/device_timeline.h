// DeviceTimeline: device events placed on the host's clock, for the trace (loader/trace_writer.h).
// An event is recorded on a stream and waited for once, and the host's time taken then; a later
// timing event's host time is that time plus the device's elapsed time between the two (the
// device's own clock: a copy's span is when the copy engine ran it, not when the host queued it).
// Good to the microsecond or so that the first wait takes to return.
#pragma once

#include <chrono>

#include "loader/device/device_backend.h"

namespace stoker::detail {

class DeviceTimeline {
 public:
  using Clock = std::chrono::steady_clock;
  // Records and waits for the origin on `stream`; throws the backend's errors.
  DeviceTimeline(DeviceBackend& backend, StreamHandle stream);
  ~DeviceTimeline();
  DeviceTimeline(const DeviceTimeline&) = delete;
  DeviceTimeline& operator=(const DeviceTimeline&) = delete;

  // When `e` (a timing event, completed) happened, on the host's clock.
  Clock::time_point at(EventHandle e);

 private:
  DeviceBackend& backend_;
  EventHandle origin_ = nullptr;
  Clock::time_point host_;
};

}  // namespace stoker::detail
