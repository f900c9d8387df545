#include "tools/loader_bench/epoch_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "stoker/option_values.h"
#include "tools/common/cli.h"

namespace stoker::tools {
namespace {

constexpr double kMiB = 1024.0 * 1024;  // binary units, as the library's messages use

// One epoch's figures as the table's line (and what it adds below it).
struct Rates {
  double samples_per_s = 0, mib_per_s = 0;
  std::size_t prefetch = 0;
};

Rates rates_of(const EpochResult& r, const stoker::Stats& s) {
  Rates x;
  x.prefetch = s.workers ? s.depth / s.workers : s.depth;
  x.samples_per_s = r.seconds > 0 ? static_cast<double>(r.samples) / r.seconds : 0;
  x.mib_per_s = r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / kMiB : 0;
  return x;
}

void report_json(const std::string& data, std::uint64_t epoch, const EpochResult& r, const Loader& loader,
                 const Args& args) {
  const stoker::Stats s = loader.stats();
  const Rates x = rates_of(r, s);
  const double sps = x.samples_per_s, mibps = x.mib_per_s;
  const std::size_t prefetch = x.prefetch;
  nlohmann::json j = {{"data", data},
                      {"epoch", epoch},
                      {"samples", r.samples},
                      {"batches", r.batches},
                      {"seconds", r.seconds},
                      {"samples_per_s", sps},
                      {"mib_per_s", mibps},
                      {"ttfb_ms", r.ttfb_ms},
                      {"wait_p50_ms", r.wait_p50_ms},
                      {"wait_p99_ms", r.wait_p99_ms},
                      {"stall_pct", r.stall_pct},
                      {"workers", s.workers},
                      {"prefetch", prefetch},
                      {"shm_bytes", s.shm_bytes},
                      {"shm_backing", s.shm_backing ? std::string(stoker::name(*s.shm_backing)) : "none"},
                      {"worker_cpu_s", r.worker_cpu_s},
                      {"consumer_cpu_s", r.consumer_cpu_s},
                      {"consumer_wakes", r.consumer_wakes}};
  j["device"] = args.device;
  j["rank"] = loader.options().shard.rank;
  j["world_size"] = loader.options().shard.world_size;
  const stoker::LoaderState state = loader.state();
  j["consumed"] = state.consumed;  // of the epoch's global order, by all ranks, after this epoch ran
  if (r.stopped) j["stopped"] = true;
  if (!s.auto_tuning.empty()) j["auto_tuning"] = s.auto_tuning;
  j["respawns"] = s.respawns;
  if (r.resumed_from) j["resumed_from"] = *r.resumed_from;
  j["fields"] = nlohmann::json::array();
  for (const auto& f : loader.schema().fields) {
    if (f.is_bytes()) {
      j["fields"].push_back({{"name", f.name}, {"kind", "bytes"}, {"dtype", std::string(stoker::dtype_name(f.dtype))}});
    } else {
      j["fields"].push_back({{"name", f.name},
                             {"kind", "fixed"},
                             {"dtype", std::string(stoker::dtype_name(f.dtype))},
                             {"shape", f.shape}});
    }
  }
  if (const std::string source = loader.describe_source(); !source.empty()) j["source"] = source;
  if (s.overflow_batches) j["overflow_batches"] = s.overflow_batches;
  if (s.shard_opens) j["shard_opens"] = s.shard_opens;
  if (s.downloads || s.cache_hits) {
    j["downloads"] = s.downloads;
    j["download_bytes"] = s.download_bytes;
    j["fetch_retries"] = s.fetch_retries;
    j["cache_hits"] = s.cache_hits;
    j["fetch_seconds"] = s.fetch_seconds;
    j["evictions"] = s.evictions;
    j["fetch_wait_seconds"] = s.fetch_wait_seconds;
  }
  if (s.skipped_samples) {
    j["skipped_samples"] = s.skipped_samples;
    j["skipped_indices"] = s.skipped_indices;
  }
  if (r.gpu_idle_pct >= 0) j["gpu_idle_pct"] = r.gpu_idle_pct;
  if (r.h2d_gib_per_s >= 0) j["h2d_gib_per_s"] = r.h2d_gib_per_s;
  if (args.device != "cpu") j["staging"] = std::string(stoker::name(s.staging));
  if (args.digest) {
    j["content_digest"] = r.content_digest;
    j["order_digest"] = r.order_digest;
  }
  j["stages"] = nlohmann::json::array();  // so far: the workers' seconds per stage, in the loader's order
  for (const stoker::StageTime& t : s.stages) j["stages"].push_back({{"name", t.name}, {"seconds", t.seconds}});
  j["step_seconds"] = s.step_seconds;
  j["verdict"] = s.verdict;
  // ASCII, every other character \u-escaped, and bytes that are not UTF-8 replaced: a field name
  // from the file can neither act on a terminal nor make the line unprintable.
  std::cout << j.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) << std::endl;
}

// Where the time went so far: the workers' stages that took any, their shares, and the verdict.
void report_stages(const stoker::Stats& s) {
  double total = 0;
  for (const stoker::StageTime& t : s.stages) total += t.seconds;
  std::vector<std::string> parts;
  for (const stoker::StageTime& t : s.stages) {
    if (t.seconds > 0) parts.push_back(fmt::format("{} {:.2f}s {:.0f}%", t.name, t.seconds, 100 * t.seconds / total));
  }
  if (!parts.empty()) std::cout << fmt::format("  workers' time so far: {}\n", fmt::join(parts, ", "));
  std::cout << fmt::format("  verdict: {}\n", s.verdict);
}

void report_table(const std::string& data, std::uint64_t epoch, const EpochResult& r, const Loader& loader,
                  const Args& args) {
  const stoker::Stats s = loader.stats();
  const Rates x = rates_of(r, s);
  const double sps = x.samples_per_s, mibps = x.mib_per_s;
  const std::size_t prefetch = x.prefetch;
  std::string name = data.size() > 28 ? "..." + data.substr(data.size() - 25) : data;
  std::cout << fmt::format(
      "{:<28} {:>5} {:>9} {:>7} {:>8.3f} {:>11.0f} {:>9.1f} {:>8.2f} {:>7.3f} {:>7.3f} {:>6.1f} {:>7} {:>8} {:>10} "
      "{:>7.2f} {:>7.2f}\n",
      name, epoch, r.samples, r.batches, r.seconds, sps, mibps, r.ttfb_ms, r.wait_p50_ms, r.wait_p99_ms, r.stall_pct,
      s.workers, prefetch, binary_size(static_cast<double>(s.shm_bytes)), r.worker_cpu_s, r.consumer_cpu_s);
  if (r.gpu_idle_pct >= 0 || r.h2d_gib_per_s >= 0) {
    std::cout << fmt::format("  device {}: gpu idle {:.1f}% of the steps, h2d {:.2f} GiB/s, staging {}{}\n",
                             args.device, r.gpu_idle_pct, r.h2d_gib_per_s, std::string(stoker::name(s.staging)),
                             args.options.staging == Staging::registered_shm && s.staging != Staging::registered_shm
                                 ? " (registered fell back: the slots could not be page-locked)"
                                 : "");
  }
  if (args.digest) std::cout << fmt::format("  content_digest {}  order_digest {}\n", r.content_digest, r.order_digest);
  report_stages(s);
  if (!s.auto_tuning.empty()) std::cout << fmt::format("  {}\n", s.auto_tuning);
  if (s.respawns > 0) std::cout << fmt::format("  workers replaced so far: {}\n", s.respawns);
  if (s.skipped_samples > 0) {
    std::cout << fmt::format("  samples skipped so far (--on-decode-error skip): {}, indices {}{}\n", s.skipped_samples,
                             fmt::join(s.skipped_indices, " "),
                             s.skipped_indices.size() == stoker::kMaxSkippedIndices ? " ..." : "");
  }
  if (r.resumed_from || r.stopped) {
    const stoker::LoaderState state = loader.state();
    std::cout << fmt::format("  {}{}rank {} of {}: {} of the epoch's {} samples consumed by all ranks\n",
                             r.resumed_from ? fmt::format("resumed at {}; ", *r.resumed_from) : "",
                             r.stopped ? "stopped early; " : "", loader.options().shard.rank,
                             loader.options().shard.world_size, state.consumed, state.num_samples);
  }
  std::cout.flush();
}

}  // namespace

void print_header() {
  std::cout << fmt::format(
      "{:<28} {:>5} {:>9} {:>7} {:>8} {:>11} {:>9} {:>8} {:>7} {:>7} {:>6} {:>7} {:>8} {:>10} {:>7} {:>7}\n", "data",
      "epoch", "samples", "batches", "seconds", "samples/s", "MiB/s", "ttfb_ms", "p50_ms", "p99_ms", "stall%",
      "workers", "prefetch", "shm", "wcpu_s", "ccpu_s");
}

void report(const std::string& data, std::uint64_t epoch, const EpochResult& r, const Loader& loader,
            const Args& args) {
  if (args.json) {
    report_json(data, epoch, r, loader, args);
  } else {
    report_table(data, epoch, r, loader, args);
  }
}

}  // namespace stoker::tools
