#include "tools/common/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "tools/common/cli.h"

namespace stoker::tools {

using Clock = std::chrono::steady_clock;

Progress::Progress(std::string what, std::uint64_t total, std::uint64_t bytes_per_item, bool quiet,
                   std::uint64_t already_done)
    : what_(std::move(what)),
      total_(total),
      bytes_per_item_(bytes_per_item),
      start_done_(already_done),
      quiet_(quiet),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_(Clock::now()),
      last_(start_) {}

double Progress::seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

std::string Progress::line(std::uint64_t done) const {
  double s = seconds();
  double rate = s > 0 ? static_cast<double>(done - start_done_) / s : 0;
  const double bytes_per_s = rate * static_cast<double>(bytes_per_item_);
  std::string eta = "--:--";
  if (rate > 0) {
    auto left = static_cast<std::uint64_t>(static_cast<double>(total_ - done) / rate);
    eta = fmt::format("{}:{:02}:{:02}", left / 3600, left / 60 % 60, left % 60);
  }
  return fmt::format("{}: {}/{} samples ({:.1f}%)  {}  ETA {}", what_, done, total_,
                     total_ ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0,
                     binary_rate(bytes_per_s), eta);
}

void Progress::update(std::uint64_t done) {
  if (quiet_) return;
  auto now = Clock::now();
  auto every = tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(5000);
  if (now - last_ < every) return;
  last_ = now;
  printed_ = true;
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K", line(done).c_str());
  } else {
    std::fprintf(stderr, "%s\n", line(done).c_str());
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (!quiet_ && tty_ && printed_) std::fprintf(stderr, "\r\033[K");
}

}  // namespace stoker::tools
