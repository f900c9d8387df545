// DeviceTrace: what the device pipeline shows in a trace of the run (docs/observability.md), when
// there is one: spans on the host's clock, on three tracks of its own. The loader implements it
// (its trace file); the device pipeline knows only this interface. Called from the staging thread
// and from any thread that releases a batch: thread-safe.
#pragma once

#include <chrono>
#include <string_view>

namespace stoker::detail {

class DeviceTrace {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Track {
    staging,  // the staging thread: a batch taken from shared memory and its copy queued
    copies,   // the copy stream: each copy as the device ran it
    idle,     // the compute streams: each gap in which they waited for data
  };
  virtual ~DeviceTrace() = default;
  // `args`: a JSON object's members ("" for none).
  virtual void span(Track track, std::string_view name, Clock::time_point from, Clock::duration duration,
                    std::string_view args) = 0;
};

}  // namespace stoker::detail
