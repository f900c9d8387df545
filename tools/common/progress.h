// Progress of long work on stderr: a line rewritten in place on a terminal (done/total, MB/s,
// ETA), a plain line every few seconds otherwise, nothing when quiet. Not synchronised.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace stoker::tools {

class Progress {
 public:
  Progress(std::string what, std::uint64_t total, std::uint64_t bytes_per_item, bool quiet,
           std::uint64_t already_done = 0);
  void update(std::uint64_t done);
  // Ends the in-place line.
  void finish();
  double seconds() const;

 private:
  std::string line(std::uint64_t done) const;
  std::string what_;
  std::uint64_t total_, bytes_per_item_, start_done_;
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point start_, last_;
  bool printed_ = false;
};

}  // namespace stoker::tools
