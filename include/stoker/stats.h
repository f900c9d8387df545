// stoker/stats.h: what a Loader has done since it was constructed (Loader::stats()).
//
// A plain value, filled in when asked for; not synchronised.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "stoker/device.h"
#include "stoker/export.h"
#include "stoker/options.h"

namespace stoker {

// Stats::skipped_indices lists at most this many samples.
inline constexpr std::size_t kMaxSkippedIndices = 1000;

// Time spent in one stage of loading (Stats::stages).
struct StageTime {
  std::string name;
  double seconds = 0;
};

// Counters since the Loader was constructed.
struct Stats {
  std::uint64_t batches = 0;
  std::uint64_t samples = 0;
  std::uint64_t bytes = 0;         // payload bytes delivered
  double wait_seconds = 0;         // time the consumer spent waiting for batches
  double worker_busy_seconds = 0;  // time workers spent reading batches (all workers)
  double worker_cpu_seconds = 0;   // CPU time of the worker processes
  std::size_t workers = 0;
  std::uint64_t respawns = 0;          // workers replaced after dying or being stuck (Options::max_respawns)
  std::uint64_t overflow_batches = 0;  // batches whose bytes fields outgrew their slot (read by the consumer)
  // Times the consumer, asleep waiting for the next batch in order, was woken by a worker's
  // finished batch: at most about one per batch, since a worker wakes it only for the batch it
  // waits for (docs/shm-layout.md); none for a batch that was ready when asked for.
  std::uint64_t consumer_wakes = 0;
  // Shard files the workers opened (a shard set; counted with the batches that opened them). Far
  // more than the number of shards: a random order over more shards than Options::max_open_shards.
  std::uint64_t shard_opens = 0;
  // Remote shards (Options::cache_dir): objects downloaded whole, the bytes received, requests made
  // again (a retried answer, a transfer resumed), and objects found complete in the cache.
  std::uint64_t downloads = 0;
  std::uint64_t download_bytes = 0;
  std::uint64_t fetch_retries = 0;
  std::uint64_t cache_hits = 0;
  // Seconds the Loader's construction spent listing and fetching remote shards (before its first
  // batch); the verdict says so apart from the epochs' waits.
  double fetch_seconds = 0;
  // Remote shards fetched as the epochs read them (a set larger than Options::cache_limit, or one
  // read through its index): shards evicted from the cache to make room, and the seconds the
  // consumer waited for a batch whose shards were still being fetched, or for the batches in flight
  // while the ring's room waited for shards (part of wait_seconds; with a staged device, the
  // staging thread's waits).
  std::uint64_t evictions = 0;
  double fetch_wait_seconds = 0;
  // Samples delivered with zeros in a field their pipeline could not decode (Options::
  // on_decode_error = skip), counted at each delivery as `samples` is (a sample skipped in two
  // epochs counts twice); and the dataset indices of the first kMaxSkippedIndices distinct ones,
  // in the order they were first delivered.
  std::uint64_t skipped_samples = 0;
  std::vector<std::uint64_t> skipped_indices;
  // Batches the ring holds: num_workers * prefetch (or fewer, when lowered to fit) plus
  // Options::held_batches; with kAuto, the tuner's current choice plus held_batches.
  std::size_t depth = 0;
  std::uint64_t shm_bytes = 0;  // shared memory reserved
  // Where it is: dev_shm or memfd; none (nullopt) for a loader without workers, which uses no
  // shared memory.
  std::optional<ShmBacking> shm_backing;
  // With num_workers or prefetch = kAuto: what the loader chose, e.g. "2 workers, prefetch 3 (auto:
  // settled)"; workers and depth above are the current choice. Empty otherwise.
  std::string auto_tuning;
  // Staged devices only:
  std::uint64_t h2d_bytes = 0;  // copied host -> device
  double h2d_seconds = 0;       // copy engine time of those copies (device events)
  // GPU idle between steps, from events on the compute stream (Batch::ready_on): the time from the
  // previous batch's release there (its step's work done) to the next batch's data being usable,
  // so it counts both a late host and a stream waiting for a copy. Host timers cannot see the latter.
  double gpu_wait_seconds = 0;
  double gpu_span_seconds = 0;  // compute stream time covered by those measurements
  std::uint64_t gpu_steps = 0;  // steps measured (Batch::ready_on calls resolved)
  // The staging in use, never automatic: Options::staging, or pinned_copy where the slots could
  // not be page-locked (for registered_shm a warning said so once).
  Staging staging = Staging::pinned_copy;

  // Where the time goes (docs/observability.md). The workers' time in each stage of the batches
  // delivered, summed over workers (without workers: the loading thread's), in this order:
  // "read" (the storage read, page faults and HDF5's inflate included), "transform"
  // (Options::transform), "write" (copies of bytes fields into the slot, or the transform's
  // staging), then each pipeline operation, "FIELD: OPERATION" ("jpeg: decode"; a repeated one
  // numbered, "jpeg: flip(0.5) #2"). Each is timed by a clock read per sample and operation, or per
  // batch.
  std::vector<StageTime> stages;
  double step_seconds = 0;  // the consumer's time between batches: its training step
  // Of wait_seconds, the waits for each epoch's first batch: its start (the workers', the files'
  // opening). The verdict leaves them out.
  double first_wait_seconds = 0;
  // One line from these numbers, by the rule in docs/observability.md: what limits throughput (the
  // training step, the workers' CPU and in which stage, storage reads, the ring's depth, the copies
  // to the device) and what to change.
  std::string verdict;
};
STOKER_API std::ostream& operator<<(std::ostream& os, const Stats& s);

}  // namespace stoker
