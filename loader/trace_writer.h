// A Chrome trace-event file (the JSON array format, which Perfetto's UI and chrome://tracing open)
// of a Loader's run, written as it goes: a track for the consumer and one per worker, spans for the
// batches and their stages, the consumer's waits and steps, instants for warnings, a counter for the
// ring (docs/observability.md). Each event is one line ending in ",": the format allows the closing
// "]" to be missing, so a run killed midway leaves a file that still loads, up to its last flush.
// Bounded: past kMaxTraceEvents the events are counted, not written, and the count is the file's
// last event. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/unique_fd.h"
#include "loader/device/device_trace.h"

namespace stoker::detail {

inline constexpr std::uint64_t kMaxTraceEvents = 1'000'000;  // about 150 MB of JSON

class TraceWriter {
 public:
  using Clock = std::chrono::steady_clock;

  // Creates (or truncates) `path`; throws stoker::Error (ErrorCode::io) naming it.
  TraceWriter(const std::string& path, int pid, std::uint32_t workers);
  ~TraceWriter();  // the dropped count, "]", and the rest written
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Track 0 is the consumer, track 1 + w worker w; with a staged device, three more (DeviceTrace's)
  // from device_track(staging) on, after the workers however many the tuner starts.
  static std::uint32_t worker_track(std::uint32_t w) noexcept { return 1 + w; }
  static std::uint32_t device_track(DeviceTrace::Track t) noexcept {
    return kDeviceTracks + static_cast<std::uint32_t>(t);
  }
  // Remote shards read through a smaller cache: a track per fetch thread (loader/shard_fetcher.h).
  static std::uint32_t fetch_track(std::uint32_t t) noexcept { return kFetchTracks + t; }

  // A span [from, from + duration) on `track`, with `args` a JSON object's members ("" for none).
  void span(std::uint32_t track, std::string_view name, Clock::time_point from, Clock::duration duration,
            std::string_view args = "");
  void instant(std::uint32_t track, std::string_view name, Clock::time_point at, std::string_view args = "");
  void counter(std::string_view name, Clock::time_point at, double value);
  // A warning as an instant on the consumer's track, written out at once: one that ends the run
  // (a worker's last death) is in the file.
  void warning(std::string_view message);
  // Writes what is buffered: always with `now`, else once 64 KiB have gathered or a second has
  // passed since the last write (called at each batch delivered).
  void flush(bool now = false);

 private:
  void event(const std::string& line);  // REQUIRES: mu_
  double micros(Clock::time_point t) const;

  std::mutex mu_;
  UniqueFd fd_;
  std::string path_;
  std::string buffer_;  // whole lines
  int pid_;
  Clock::time_point origin_;
  std::uint64_t events_ = 0, dropped_ = 0;
  Clock::time_point written_;  // the last write
  static constexpr std::uint32_t kDeviceTracks = 1u << 20;
  static constexpr std::uint32_t kFetchTracks = kDeviceTracks + 16;
  std::vector<bool> named_;              // per track: its name event written
  std::vector<bool> fetch_named_;        // the same for the fetch threads' tracks
  bool device_named_[3] = {};            // the same for the device's tracks
  void name_track(std::uint32_t track);  // REQUIRES: mu_
};

// The device pipeline's spans on the trace's device tracks.
class DeviceTraceTracks final : public DeviceTrace {
 public:
  explicit DeviceTraceTracks(TraceWriter& trace) : trace_(trace) {}
  void span(Track track, std::string_view name, Clock::time_point from, Clock::duration duration,
            std::string_view args) override {
    trace_.span(TraceWriter::device_track(track), name, from, duration, args);
  }

 private:
  TraceWriter& trace_;
};

// `text` as a JSON string, quoted, its bytes that are not UTF-8 replaced (a field name from a file).
std::string json_text(std::string_view text);

}  // namespace stoker::detail
