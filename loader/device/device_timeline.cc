#include "loader/device/device_timeline.h"

#include <utility>

namespace stoker::detail {
namespace {

// A timing event recorded on `stream` and waited for; its host time is the wait's end.
EventHandle origin_on(DeviceBackend& backend, StreamHandle stream, DeviceTimeline::Clock::time_point& host) {
  EventHandle e = backend.create_event(true);
  try {
    backend.record(e, stream);
    backend.synchronize(e);
  } catch (...) {
    backend.destroy_event(e);
    throw;
  }
  host = DeviceTimeline::Clock::now();
  return e;
}

}  // namespace

DeviceTimeline::DeviceTimeline(DeviceBackend& backend, StreamHandle stream) : backend_(backend) {
  origin_ = origin_on(backend_, stream, host_);
}

DeviceTimeline::~DeviceTimeline() { backend_.destroy_event(origin_); }

DeviceTimeline::Clock::time_point DeviceTimeline::at(EventHandle e) {
  std::lock_guard lock(mu_);
  const double seconds = backend_.elapsed_seconds(origin_, e);
  return host_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void DeviceTimeline::refresh(StreamHandle stream) {
  {
    std::lock_guard lock(mu_);
    if (Clock::now() - host_ < kRefresh) return;
  }
  Clock::time_point host;
  EventHandle fresh = origin_on(backend_, stream, host);  // outside the lock: it waits
  std::lock_guard lock(mu_);
  backend_.destroy_event(std::exchange(origin_, fresh));
  host_ = host;
}

}  // namespace stoker::detail
