// ProgressWatch: whether a worker is stuck, told from its progress counter in shared memory
// (WorkerChannel::progress, bumped by the worker at every step of a batch) rather than from the
// wall clock alone. A worker is stuck when it has had work for `timeout` of time in which it could
// run and its counter did not move:
//   - time is counted in looks at most kMaxStep apart: after the whole job was suspended (Ctrl-Z,
//     scontrol suspend, docker pause: the consumer stopped too), the first look counts one step,
//     not the pause;
//   - a worker seen stopped (SIGSTOP, a debugger's stop) counts nothing: it could not run;
//   - a worker without work counts nothing: idle is not stuck.
// A slow disk that still delivers a sample now and then is progress; a read hung in the kernel (D
// state on a dead NFS server) or a decoder looping is not. Pure: the caller brings the clock, the
// counters and the stopped states (unit-tested without processes).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

namespace stoker::detail {

class ProgressWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // How long the consumer waits between looks while it waits for a batch.
  static constexpr std::chrono::milliseconds kLookInterval{250};
  // The most one look may count: a gap longer than this was a suspension of the consumer.
  static constexpr std::chrono::milliseconds kMaxStep{500};
  // A look sooner than this after the last one that counted is no look: whether a worker is stopped
  // is a read of /proc, and a consumer that takes batches as fast as they come looks between every
  // two of them (the time is counted at the next look that counts).
  static constexpr std::chrono::milliseconds kMinStep{10};

  // timeout zero: never stuck.
  ProgressWatch(std::uint32_t num_workers, std::chrono::milliseconds timeout);

  // Worker w was replaced: its successor starts from zero.
  void reset(std::uint32_t w) noexcept;
  // One look at worker w at `now`: its counter and whether it has work; `stopped` is asked only
  // when the counter did not move. Returns true when w is stuck.
  bool look(std::uint32_t w, std::uint64_t progress, bool has_work, const std::function<bool()>& stopped,
            Clock::time_point now);
  // The time w has made no progress while it could run.
  std::chrono::milliseconds stalled(std::uint32_t w) const noexcept;
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }

 private:
  struct State {
    bool watching = false;  // has work, and a first look was taken
    std::uint64_t progress = 0;
    Clock::time_point last_look{};
    Clock::duration stalled{};
  };
  std::vector<State> workers_;
  std::chrono::milliseconds timeout_;
};

}  // namespace stoker::detail
