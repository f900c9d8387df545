// ShardFetcher: a loader's remote shards when they take more than Options::cache_limit
// (docs/remote.md, "A cache smaller than the set"). Nothing is fetched before the first batch but
// what the loader reads to learn the set; each epoch, the batches' shards are fetched in the order
// the epoch reads them, Options::fetch_parallelism at once and as far ahead as the cache holds, and
// the shard read again furthest in the future is evicted to make room (loader/plan/
// shard_schedule.h: Belady's policy, the fewest fetches possible for the order). A batch is issued
// to a worker only when its shards are cached (BatchGate), and a shard is evicted only once every
// batch before its eviction point has been taken from the ring: no worker reads a shard that goes.
//
// Every shard in the cache is held (remote::HeldObject): a second loader on the node (another
// rank) that evicts it keeps the file while this one holds it.
//
// Threads: the consumer's (start, abandon, taken_before, ready, wait_ready), any thread's
// interrupt(), and fetch_parallelism fetch threads started by the first start(), after the fork
// server. mu_ guards everything below it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "loader/plan/epoch_plan.h"
#include "loader/plan/shard_schedule.h"
#include "loader/producers/batch_gate.h"
#include "loader/trace_writer.h"
#include "remote/shard_cache.h"

namespace stoker::detail {

class ShardFetcher final : public BatchGate {
 public:
  // A shard of the set that is remote: where it is, what it is, where it lies in the cache.
  struct RemoteShard {
    remote::RemoteObject object;
    remote::ObjectInfo info;
    std::string path;
  };
  // shards[k]: shard k of the set, or nullopt for a local file. `capacity`: how many shards the
  // cache holds at once (at least one). `cache`: its directory, fetch_parallelism and policy.
  ShardFetcher(std::vector<std::optional<RemoteShard>> shards, std::size_t capacity, remote::CacheOptions cache,
               remote::FetchCounters& counters);
  ~ShardFetcher() override;
  ShardFetcher(const ShardFetcher&) = delete;
  ShardFetcher& operator=(const ShardFetcher&) = delete;

  std::size_t capacity() const noexcept { return capacity_; }
  const std::string& cache_dir() const noexcept { return cache_.dir; }
  const std::vector<std::optional<RemoteShard>>& shards() const noexcept { return shards_; }

  // Before the first epoch: the digests of the shards' bytes the set's index gives (loader/
  // set_index.h), per shard (nullopt: not checked). A shard found cached with another digest is
  // fetched again; fetched with another, it is an error naming it.
  void expect_digests(std::vector<std::optional<std::uint64_t>> digests);

  // Before the first epoch (no fetch thread yet): holds exactly the remote shards of `wanted` (at
  // most capacity()), evicting the others and fetching what is missing, in the calling thread's
  // time (keep_going asked every 50 ms). Throws the fetch's error.
  void hold_only(const std::vector<std::uint32_t>& wanted, const std::function<bool()>& keep_going);

  // Before the first epoch: holds, up to capacity(), the remote shards found whole in the cache
  // (another loader's), in the set's order: the first epoch starts with them. The others found
  // whole are evicted (deleted where no other process holds them): the cache keeps to its limit
  // across runs. Never waits for a lock, never fetches.
  void hold_found();

  // Starts the fetches of `plan`'s batches from `first` on, the cache's content as it is.
  // `starts`: the shards' first samples, and the set's sample count last. Throws stoker::Error
  // (ErrorCode::invalid_option) when a batch reads more shards than the cache holds, naming it.
  // REQUIRES: abandon() since the last start().
  void start(const EpochPlan& plan, std::uint64_t first, const std::vector<std::uint64_t>& starts);
  // Stops the epoch's fetches and waits for those under way (a shard half fetched is resumed by
  // the next fetch of it).
  void abandon() noexcept;
  // Batches before b have been taken from the ring: the shards only they read may go.
  void taken_before(std::uint64_t b);
  // Calls fetcher->taken_before(b) when it goes, however the batch's delivery ends (null: nothing).
  class Taken {
   public:
    Taken(ShardFetcher* fetcher, std::uint64_t b) noexcept : fetcher_(fetcher), b_(b) {}
    ~Taken() {
      if (fetcher_) fetcher_->taken_before(b_);
    }
    Taken(const Taken&) = delete;
    Taken& operator=(const Taken&) = delete;

   private:
    ShardFetcher* fetcher_;
    std::uint64_t b_;
  };

  bool ready(std::uint64_t b) override;
  bool wait_ready(std::uint64_t b, std::chrono::steady_clock::time_point until) override;
  void interrupt() noexcept override;

  // From now on, each fetch is a span on its thread's track of `trace`, and each wait in
  // wait_ready() one on the consumer's (null: none). `trace` outlives the fetches.
  void set_trace(TraceWriter* trace) noexcept { trace_ = trace; }

  // The time consumers waited in wait_ready() for a shard (the epoch's fetch waits), in seconds.
  double waited_seconds() const;

 private:
  void fetch_loop(std::uint32_t thread);
  // Shard k held as hold_object() holds it, checked against its digest (expect_digests).
  remote::HeldObject hold_checked(std::size_t k, const remote::FetchPolicy& policy);
  bool can_take() const;                 // mu_ held
  bool is_ready(std::uint64_t b) const;  // mu_ held; rethrows error_

  const std::vector<std::optional<RemoteShard>> shards_;
  std::vector<std::optional<std::uint64_t>> digests_;  // per shard; set before the fetch threads start
  const std::size_t capacity_;
  const remote::CacheOptions cache_;
  remote::FetchCounters& counters_;
  std::atomic<bool> stop_fetches_{false};  // FetchPolicy::stop of the fetches under way

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<remote::HeldObject> held_;  // per shard: held while cached
  ShardSchedule schedule_;
  std::uint64_t first_ = 0;    // schedule_'s first batch
  std::size_t next_step_ = 0;  // steps taken by fetch threads
  std::vector<bool> step_done_;
  std::size_t steps_done_ = 0;      // steps [0, steps_done_) are done
  std::uint64_t taken_before_ = 0;  // batches before it are out of the ring
  std::size_t running_ = 0;         // steps under way
  bool started_ = false;            // an epoch's schedule is in place
  bool interrupted_ = false, quit_ = false;
  std::exception_ptr error_;  // the epoch's first failed fetch
  double waited_ = 0;
  std::vector<std::thread> threads_;
  TraceWriter* trace_ = nullptr;  // set before the first start()
};

}  // namespace stoker::detail
