#include "loader/device/device_timeline.h"

namespace stoker::detail {

DeviceTimeline::DeviceTimeline(DeviceBackend& backend, StreamHandle stream) : backend_(backend) {
  origin_ = backend_.create_event(true);
  try {
    backend_.record(origin_, stream);
    backend_.synchronize(origin_);
  } catch (...) {
    backend_.destroy_event(origin_);
    throw;
  }
  host_ = Clock::now();
}

DeviceTimeline::~DeviceTimeline() { backend_.destroy_event(origin_); }

DeviceTimeline::Clock::time_point DeviceTimeline::at(EventHandle e) {
  const double seconds = backend_.elapsed_seconds(origin_, e);
  return host_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace stoker::detail
