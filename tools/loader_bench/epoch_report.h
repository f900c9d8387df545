// loader-bench's report of an epoch: a line of the table (with what it adds below it: the device,
// the digests, where the time went and the verdict, the tuner, respawns, skipped samples), or one
// JSON object (--json).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "stoker/loader.h"
#include "tools/loader_bench/bench_args.h"

namespace stoker::tools {

struct EpochResult {
  std::uint64_t samples = 0, batches = 0, bytes = 0;
  double gpu_idle_pct = -1, h2d_gib_per_s = -1;
  double seconds = 0, ttfb_ms = 0, wait_p50_ms = 0, wait_p99_ms = 0, stall_pct = 0;
  double worker_cpu_s = 0, consumer_cpu_s = 0;
  std::uint64_t consumer_wakes = 0;
  std::string content_digest, order_digest;
  bool stopped = false;                       // by --stop-after-batches
  std::optional<std::uint64_t> resumed_from;  // the state's consumed count
};

// The table's header line.
void print_header();
// One epoch's line (or JSON object) on stdout, with the loader's stats as they are now.
void report(const std::string& data, std::uint64_t epoch, const EpochResult& r, const Loader& loader, const Args& args);

}  // namespace stoker::tools
