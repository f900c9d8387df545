#include "loader/trace_writer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "base/option_spelling.h"
#include "base/posix_error.h"

namespace stoker::detail {
namespace {

constexpr std::size_t kFlushBytes = 64 << 10;

// Writes all of `text`, or gives up quietly: a trace is a diagnosis, never the run's failure.
void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

}  // namespace

std::string json_text(std::string_view text) {
  return nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

TraceWriter::TraceWriter(const std::string& path, int pid, std::uint32_t workers)
    : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)),
      path_(path),
      pid_(pid),
      origin_(Clock::now()) {
  if (!fd_) throw_errno(fmt::format("stoker: the trace file {} ({})", path, option_name("trace")));
  std::lock_guard lock(mu_);
  buffer_ = "[\n";
  event(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"args":{{"name":"stoker"}}}})", pid_));
  for (std::uint32_t track = 0; track <= workers; ++track) name_track(track);
  write_all(fd_.get(), buffer_);  // a file that loads from the start
  buffer_.clear();
  written_ = Clock::now();
}

void TraceWriter::name_track(std::uint32_t track) {
  std::string name;
  if (track >= kFetchTracks) {
    const std::uint32_t t = track - kFetchTracks;
    if (t < fetch_named_.size() && fetch_named_[t]) return;
    if (t >= fetch_named_.size()) fetch_named_.resize(t + 1, false);
    fetch_named_[t] = true;
    name = fmt::format("remote fetches {}", t);
  } else if (track >= kDeviceTracks) {
    bool& named = device_named_[track - kDeviceTracks];
    if (named) return;
    named = true;
    static constexpr const char* kNames[] = {"staging", "device: copies", "device: idle"};
    name = kNames[track - kDeviceTracks];
  } else {
    if (track < named_.size() && named_[track]) return;
    if (track >= named_.size()) named_.resize(track + 1, false);
    named_[track] = true;
    name = track == 0 ? "consumer" : fmt::format("worker {}", track - 1);
  }
  event(fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{}}}}})", pid_, track,
                    json_text(name)));
  event(fmt::format(R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})", pid_,
                    track, track));
}

TraceWriter::~TraceWriter() {
  std::lock_guard lock(mu_);
  buffer_ +=
      fmt::format(R"({{"ph":"M","name":"stoker_dropped_events","pid":{},"args":{{"dropped":{}}}}})", pid_, dropped_);
  buffer_ += "\n]\n";
  write_all(fd_.get(), buffer_);
}

double TraceWriter::micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

void TraceWriter::event(const std::string& line) {
  if (events_ >= kMaxTraceEvents) {
    ++dropped_;
    return;
  }
  ++events_;
  buffer_ += line;
  buffer_ += ",\n";
}

void TraceWriter::span(std::uint32_t track, std::string_view name, Clock::time_point from, Clock::duration duration,
                       std::string_view args) {
  const double dur = std::chrono::duration<double, std::micro>(duration).count();
  std::lock_guard lock(mu_);
  name_track(track);  // a worker the tuner added
  event(fmt::format(R"({{"ph":"X","name":{},"pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f}{}{}{}}})", json_text(name), pid_,
                    track, micros(from), dur, args.empty() ? "" : R"(,"args":{)", args, args.empty() ? "" : "}"));
}

void TraceWriter::instant(std::uint32_t track, std::string_view name, Clock::time_point at, std::string_view args) {
  std::lock_guard lock(mu_);
  event(fmt::format(R"({{"ph":"i","s":"t","name":{},"pid":{},"tid":{},"ts":{:.3f}{}{}{}}})", json_text(name), pid_,
                    track, micros(at), args.empty() ? "" : R"(,"args":{)", args, args.empty() ? "" : "}"));
}

void TraceWriter::counter(std::string_view name, Clock::time_point at, double value) {
  std::lock_guard lock(mu_);
  event(fmt::format(R"({{"ph":"C","name":{},"pid":{},"ts":{:.3f},"args":{{"value":{}}}}})", json_text(name), pid_,
                    micros(at), value));
}

void TraceWriter::warning(std::string_view message) {
  instant(0, "warning", Clock::now(), fmt::format(R"("message":{})", json_text(message)));
  flush(true);
}

void TraceWriter::flush(bool now) {
  std::lock_guard lock(mu_);
  const auto t = Clock::now();
  if (buffer_.empty() || (!now && buffer_.size() < kFlushBytes && t - written_ < std::chrono::seconds(1))) return;
  write_all(fd_.get(), buffer_);
  buffer_.clear();
  written_ = t;
}

}  // namespace stoker::detail
