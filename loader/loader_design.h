// LoaderDesign: what a Loader will be, decided from its options before any file is opened, memory
// reserved, process forked or thread started. Pure functions of their arguments, unit-tested
// without any of those (tests/loader/loader_design_test.cc); LoaderImpl carries them out.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "formats/core/reader.h"
#include "loader/producers/auto_tuner.h"
#include "stoker/options.h"
#include "stoker/schema.h"

namespace stoker::detail {

struct LoaderDesign {
  Order order = Order::sequential;        // Options::order, with Options::shuffle
  formats::ReaderOptions reader_options;  // what every reader of the dataset is opened with
  // Worker processes forked: Options::num_workers, or for kAuto one per CPU this process may use
  // (1 to 16), of which the tuner activates what helps.
  std::uint32_t num_workers = 0;
  // Batches per worker the ring is sized for: Options::prefetch, or for kAuto the deepest the
  // tuner may use. Without workers: the number of batch buffers.
  std::uint32_t prefetch = 0;
  // Slots for the batches the training loop keeps (Options::held_batches), on top of the workers'.
  // None on a staged device: there the kept batches hold device buffers, and the ring's consumer
  // is the staging thread, which lets each slot go.
  std::uint32_t held_slots = 0;
  bool auto_workers = false;
  bool auto_prefetch = false;
};

// `cpus`: the CPUs this process may use (usable_cpus(); 0 when unknown), auto workers' ceiling.
LoaderDesign design_loader(const Options& options, unsigned cpus);

// How many consecutive batches of this rank one worker takes, so that a quasi-random window's
// chunks are read by one worker (TaskTable::worker_for_next); 0 for the other orders.
std::uint64_t affinity_span(const LoaderDesign& design, std::uint64_t group, std::uint32_t world_size,
                            std::size_t batch_size);

// The auto-tuner's limits over a ring of `depth` slots of `slot_bytes`, `design.held_slots` of them
// kept for the training loop, on a CPU whose last-level cache holds `cache_bytes` (0: unknown);
// nullopt when nothing is automatic.
std::optional<AutoTuner::Limits> tuner_limits(const LoaderDesign& design, std::uint32_t depth,
                                              std::size_t slot_bytes = 0, std::size_t cache_bytes = 0);

// The bytes of the last-level data cache (level 3 at most) that `cache_dir` describes, a sysfs
// directory of a CPU's caches (/sys/devices/system/cpu/cpuN/cache: indexK/{level,type,size}); 0
// where it describes none.
std::size_t cache_bytes_in(const std::string& cache_dir);
// cache_bytes_in() of the first CPU this process may run on.
std::size_t last_level_cache_bytes();

// The CPUs this process may run on: those of its affinity mask (this thread's, which the workers it
// forks inherit), fewer where its cgroup's CPU quota allows fewer; 0 when unknown.
unsigned usable_cpus();
// The CPUs the CPU quotas of a process's cgroups allow, rounded up: the smallest quota of its cgroup
// or any above it (a container's, a systemd slice's), cgroup v2's cpu.max or v1's cpu controller,
// in the hierarchies mounted under `root` (/sys/fs/cgroup); 0 when none sets one. `self_cgroup`:
// the process's /proc/self/cgroup, which names its cgroup in each (empty: their roots).
unsigned cgroup_cpu_quota(const std::string& root, const std::string& self_cgroup);
// The warning for `num_workers` workers on `cpus` CPUs, or "" when they fit (or `cpus` is 0). A few
// more workers than CPUs can hide storage latency; past twice as many they only take turns, each
// batch waiting for a CPU, and cost memory.
std::string oversubscription_warning(std::size_t num_workers, unsigned cpus);
// That warning for usable_cpus() the first time `said` is not set (then set), "" every other time:
// with the process's own flag, once per process.
std::string oversubscription_warning_once(std::size_t num_workers, std::atomic<bool>& said);
std::string oversubscription_warning_once(std::size_t num_workers);

// Throws stoker::Error (ErrorCode::invalid_option) when `delivered` has bytes fields and the device
// is staged: those stay on the CPU.
void check_fields_fit_device(const Schema& delivered, const Options& options);

}  // namespace stoker::detail
