// BatchGate: what a batch waits for before a worker may read it, beyond a free slot: its shards
// fetched into the cache, when they are remote and the cache holds fewer than the set
// (loader/shard_fetcher.h). A source asks ready() before it issues a batch and, when nothing is
// in flight, waits for it.
#pragma once

#include <chrono>
#include <cstdint>

namespace stoker::detail {

class BatchGate {
 public:
  virtual ~BatchGate() = default;
  // Whether batch b of the current epoch may be read now. Throws stoker::Error when it never will
  // (a fetch failed: the error names the shard and why).
  virtual bool ready(std::uint64_t b) = 0;
  // Waits until ready(b), or until `until`: whether it is. Throws as ready(), and stoker::Error
  // (ErrorCode::interrupted) after interrupt().
  virtual bool wait_ready(std::uint64_t b, std::chrono::steady_clock::time_point until) = 0;
  // Makes a wait_ready() in another thread throw (any thread; for shutdown).
  virtual void interrupt() noexcept = 0;
};

}  // namespace stoker::detail
