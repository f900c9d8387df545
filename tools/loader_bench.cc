// loader-bench: how fast stoker delivers a dataset, epoch by epoch, and proof of what it delivered.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "formats/core/npy.h"
#include "stoker/device_stream.h"
#include "stoker/digest.h"
#include "stoker/init.h"
#include "stoker/loader.h"
#include "stoker/state.h"
#include "tools/atomic_output.h"
#include "tools/cli.h"
#include "tools/output_check.h"
#include "tools/progress.h"
#include "tools/synthetic_data.h"

namespace {

using Clock = std::chrono::steady_clock;
// One system of units throughout: binary (MiB = 2^20 bytes), as the library's messages use.
constexpr double kMiB = 1024.0 * 1024, kGiB = kMiB * 1024;
using stoker::Batch;
using stoker::Loader;
using stoker::Options;

struct Args {
  std::string data;
  std::string format = "auto";
  std::vector<std::string> fields;
  std::string group;
  std::string pipeline;
  std::string save_batch;
  std::size_t batch_size = 256;
  std::string workers = "2";  // a number, or "auto"
  std::string prefetch = "2";
  bool shuffle = false;
  std::string order;
  std::uint64_t seed = 0;
  int epochs = 2;
  bool drop_last = false;
  std::string device = "cpu";
  double step_ms = 0;
  std::uint64_t shm_budget = 0;
  bool json = false;
  bool digest = false;
  std::string make_data;
  std::string make_demo;
  std::uint64_t demo_samples = 100000;
  std::uint64_t max_batches = 0;
  bool shard_from_env = false;
  std::uint64_t stop_after_batches = 0;
  std::string state_out;
  std::string resume;
  std::string shm_backing = "auto";
  std::string staging = "auto";
  std::string trace;
  double timeout_s = 300;
  std::uint32_t max_respawns = 3;
  int worker_oom_score_adj = 500;
  std::size_t max_open_shards = 64;
  std::string lmdb_keys, lmdb_count_key;
  std::uint64_t max_image_pixels = stoker::kDefaultMaxImagePixels;
  std::string on_decode_error = "fail";
};

double process_cpu_seconds() {
  timespec ts;
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto k = static_cast<std::size_t>(std::lround(p * static_cast<double>(v.size() - 1)));
  return v[std::min(k, v.size() - 1)];
}

// The "training loop" side on a staged device: a compute stream of its own, a simulated step,
// and at most one step queued ahead of the host, as a loop that reads its loss each step has.
struct DeviceLoop {
  stoker::DeviceStream stream;
  std::uint64_t previous = 0;  // the mark after the previous step (0: none)

  explicit DeviceLoop(const stoker::Device& device) : stream(device) {}
  void consume(Batch& b, double step_ms) {
    b.ready_on(stream.handle());
    stream.simulate_step(step_ms);
    const std::uint64_t mark = stream.mark();
    stream.wait(previous);
    previous = mark;
  }
  void finish() {
    stream.synchronize();
    previous = 0;
  }
};

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

// The first batch as NumPy files in `dir`: FIELD.npy per fixed field; FIELD.bytes.npy (u8, flat)
// and FIELD.offsets.npy (u64, B+1) per bytes field; indices.npy. A '/' in a field name becomes '.'.
void save_batch(const std::string& dir, const Batch& b) {
  using stoker::formats::write_npy;
  std::filesystem::create_directories(dir);
  const std::int64_t samples[] = {static_cast<std::int64_t>(b.size())};
  write_npy(dir + "/indices.npy", stoker::DType::u64, samples, b.indices().data(), b.indices().size_bytes());
  for (const auto& f : b.fields()) {
    std::string name(f.name);
    std::replace(name.begin(), name.end(), '/', '.');
    if (f.kind == stoker::FieldKind::bytes) {
      const std::int64_t bytes[] = {static_cast<std::int64_t>(f.bytes)};
      const std::int64_t offsets[] = {static_cast<std::int64_t>(f.offsets.size())};
      write_npy(dir + "/" + name + ".bytes.npy", stoker::DType::u8, bytes, f.data, f.bytes);
      write_npy(dir + "/" + name + ".offsets.npy", stoker::DType::u64, offsets, f.offsets.data(),
                f.offsets.size_bytes());
    } else {
      write_npy(dir + "/" + name + ".npy", f.dtype, f.shape, f.data, f.bytes);
    }
  }
}

// One epoch: a fresh one, or the one a saved state resumes. `stop_after` (0: none) ends it early,
// as a preempted job would.
EpochResult run_epoch(Loader& loader, std::uint64_t epoch, const std::optional<stoker::LoaderState>& resume,
                      std::uint64_t stop_after, const Args& args, DeviceLoop* device) {
  EpochResult r;
  stoker::ContentDigest content;
  stoker::OrderDigest order;
  std::vector<double> waits;
  const stoker::Stats before = loader.stats();
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  double waited = 0;
  auto e = resume ? loader.epoch(*resume) : loader.epoch(epoch);
  for (;;) {
    auto w0 = Clock::now();
    std::optional<Batch> b = e.next();
    double wait = std::chrono::duration<double>(Clock::now() - w0).count();
    if (!b) break;
    if (r.batches == 0) r.ttfb_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    waits.push_back(wait * 1e3);
    waited += wait;
    if (r.batches == 0 && !args.save_batch.empty() && !device) save_batch(args.save_batch, *b);
    r.batches += 1;
    r.samples += b->size();
    for (const auto& f : b->fields()) r.bytes += f.bytes;
    if (args.digest) {
      content.add(*b);  // a staged batch is read back once its copy has landed
      order.add(*b);
    }
    if (device) {
      device->consume(*b, args.step_ms);
    } else if (args.step_ms > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(args.step_ms));
    }
    if (args.max_batches && r.batches >= args.max_batches) break;
    if (stop_after && r.batches >= stop_after) {
      r.stopped = true;
      break;
    }
  }
  if (device) device->finish();
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r.wait_p50_ms = percentile(waits, 0.5);
  r.wait_p99_ms = percentile(waits, 0.99);
  r.stall_pct = r.seconds > 0 ? 100.0 * waited / r.seconds : 0;
  const stoker::Stats after = loader.stats();
  r.worker_cpu_s = after.worker_cpu_seconds - before.worker_cpu_seconds;
  r.consumer_wakes = after.consumer_wakes - before.consumer_wakes;
  if (device) {
    double span = after.gpu_span_seconds - before.gpu_span_seconds;
    double h2d = after.h2d_seconds - before.h2d_seconds;
    if (span > 0) r.gpu_idle_pct = 100.0 * (after.gpu_wait_seconds - before.gpu_wait_seconds) / span;
    if (h2d > 0) r.h2d_gib_per_s = static_cast<double>(after.h2d_bytes - before.h2d_bytes) / h2d / kGiB;
  }
  r.consumer_cpu_s = process_cpu_seconds() - cpu0;
  if (args.digest) {
    r.content_digest = content.hex();
    r.order_digest = order.hex();
  }
  return r;
}

const char* staging_name(stoker::Staging s) {
  return s == stoker::Staging::registered_shm ? "registered_shm" : "pinned_copy";
}

void print_header() {
  std::cout << fmt::format(
      "{:<28} {:>5} {:>9} {:>7} {:>8} {:>11} {:>9} {:>8} {:>7} {:>7} {:>6} {:>7} {:>8} {:>10} {:>7} {:>7}\n", "data",
      "epoch", "samples", "batches", "seconds", "samples/s", "MiB/s", "ttfb_ms", "p50_ms", "p99_ms", "stall%",
      "workers", "prefetch", "shm", "wcpu_s", "ccpu_s");
}

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
                      {"shm_backing", s.shm_backing == stoker::ShmBacking::memfd     ? "memfd"
                                      : s.shm_backing == stoker::ShmBacking::dev_shm ? "dev_shm"
                                                                                     : "none"},
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
  if (s.skipped_samples) {
    j["skipped_samples"] = s.skipped_samples;
    j["skipped_indices"] = s.skipped_indices;
  }
  if (r.gpu_idle_pct >= 0) j["gpu_idle_pct"] = r.gpu_idle_pct;
  if (r.h2d_gib_per_s >= 0) j["h2d_gib_per_s"] = r.h2d_gib_per_s;
  if (args.device != "cpu") j["staging"] = staging_name(s.staging);
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
      s.workers, prefetch, stoker::tools::binary_size(static_cast<double>(s.shm_bytes)), r.worker_cpu_s,
      r.consumer_cpu_s);
  if (r.gpu_idle_pct >= 0 || r.h2d_gib_per_s >= 0) {
    std::cout << fmt::format("  device {}: gpu idle {:.1f}% of the steps, h2d {:.2f} GiB/s, staging {}{}\n",
                             args.device, r.gpu_idle_pct, r.h2d_gib_per_s, staging_name(s.staging),
                             args.staging == "registered" && s.staging != stoker::Staging::registered_shm
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

void report(const std::string& data, std::uint64_t epoch, const EpochResult& r, const Loader& loader,
            const Args& args) {
  if (args.json) {
    report_json(data, epoch, r, loader, args);
  } else {
    report_table(data, epoch, r, loader, args);
  }
}

stoker::LoaderState read_state(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw stoker::Error::from_errno(errno, path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return stoker::LoaderState::from_json(text.str());
  } catch (const stoker::Error& e) {
    throw stoker::Error(fmt::format("{}: {}", path, e.what()));
  }
}

// A job killed while writing never leaves half a state.
void write_state(const std::string& path, const stoker::LoaderState& state) {
  stoker::tools::write_file_atomically(path, state.to_json() + "\n");
}

void bench(const std::string& path, const Args& args) {
  std::optional<stoker::LoaderState> resume;  // read first: a bad state file fails before any work
  if (!args.resume.empty()) resume = read_state(args.resume);
  Options o;
  // "a.h5,b.h5": a list of shards (a path that exists as written is one dataset, commas and all).
  if (path.find(',') != std::string::npos && !std::filesystem::exists(path)) {
    for (std::size_t at = 0;;) {
      const std::size_t comma = path.find(',', at);
      o.sources.push_back(path.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  } else {
    o.source = path;
  }
  o.max_open_shards = args.max_open_shards;
  o.lmdb_keys = args.lmdb_keys;
  o.lmdb_count_key = args.lmdb_count_key;
  o.format = args.format == "hdf5"   ? stoker::Format::hdf5
             : args.format == "lmdb" ? stoker::Format::lmdb
                                     : stoker::Format::auto_detect;
  o.fields = args.fields;
  o.group = args.group;
  o.pipeline = args.pipeline;
  o.max_image_pixels = args.max_image_pixels;
  o.on_decode_error = args.on_decode_error == "skip" ? stoker::OnDecodeError::skip : stoker::OnDecodeError::fail;
  o.batch_size = args.batch_size;
  o.num_workers = args.workers == "auto" ? stoker::kAuto : std::stoul(args.workers);
  o.prefetch = args.prefetch == "auto" ? stoker::kAuto : std::stoul(args.prefetch);
  o.shuffle = args.shuffle;
  if (args.order == "random") o.order = stoker::Order::random;
  if (args.order == "quasi-random") o.order = stoker::Order::quasi_random;
  o.seed = args.seed;
  o.drop_last = args.drop_last;
  o.shm_budget = args.shm_budget;
  o.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(args.timeout_s * 1000));
  o.max_respawns = args.max_respawns;
  o.worker_oom_score_adj = args.worker_oom_score_adj;
  o.shm_backing = args.shm_backing == "memfd"     ? stoker::ShmBacking::memfd
                  : args.shm_backing == "dev-shm" ? stoker::ShmBacking::dev_shm
                                                  : stoker::ShmBacking::automatic;
  if (args.shard_from_env) o.shard = stoker::Shard::from_env();
  o.device = stoker::Device::parse(args.device);
  o.staging = args.staging == "registered" ? stoker::Staging::registered_shm
              : args.staging == "pinned"   ? stoker::Staging::pinned_copy
                                           : stoker::Staging::automatic;
  o.trace = args.trace;
  Loader loader(o);
  std::unique_ptr<DeviceLoop> device;
  if (o.device.staged()) device = std::make_unique<DeviceLoop>(o.device);
  if (!args.json) {
    // What is delivered comes first: a field left out is visible before any figure.
    const std::string source = loader.describe_source();
    std::cout << fmt::format("{}: {} samples, fields {}{}\n", path, loader.schema().num_samples,
                             loader.schema().describe_fields(), source.empty() ? "" : " (" + source + ")");
    static bool header_printed = false;
    if (!std::exchange(header_printed, true)) {
      if (args.step_ms <= 0) {
        std::cout << "(no --step-ms: the training step is empty, so stall% is the share of a loop that only waits "
                     "for data and is near 100 by construction; --step-ms T simulates a step of T ms)\n";
      }
      print_header();
    }
  }
  std::uint64_t first = resume ? resume->epoch : 0;
  for (std::uint64_t e = first; e < first + static_cast<std::uint64_t>(args.epochs); ++e) {
    EpochResult r = run_epoch(loader, e, e == first ? resume : std::nullopt, e == first ? args.stop_after_batches : 0,
                              args, device.get());
    if (e == first && resume) r.resumed_from = resume->consumed;
    report(path, e, r, loader, args);
    if (r.stopped) break;  // a preempted job: nothing more runs
  }
  if (!args.state_out.empty()) write_state(args.state_out, loader.state());
}

// The tools' progress (tools/progress.h) as the writers' callback.
std::function<void(std::uint64_t)> progress_for(const std::string& what, std::uint64_t total,
                                                std::uint64_t bytes_per_sample) {
  auto progress = std::make_shared<stoker::tools::Progress>(what, total, bytes_per_sample, false);
  return [progress, total](std::uint64_t done) {
    progress->update(done);
    if (done == total) progress->finish();
  };
}

// Writes one dataset into PATH.partial, then moves it over PATH: a run stopped half-way leaves no
// half dataset under PATH (which a later run would take as made), and one already there is replaced
// whole, not appended to (the LMDB writer resumes a database it finds). Only a dataset of the same
// format is replaced, only a stopped run's PATH.partial removed (tools/output_check.h); a write
// that fails (a full disk) removes its PATH.partial.
void write_whole(const std::string& path, bool hdf5, const std::function<void(const std::string&)>& write) {
  const stoker::tools::OutputKind kind{"loader-bench", !hdf5, hdf5, ""};
  const std::string partial = path + ".partial";
  stoker::tools::check_output(path, kind, true);
  if (stoker::tools::check_partial(partial, kind)) std::filesystem::remove_all(partial);  // a stopped run's
  try {
    write(partial);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(partial, ignored);
    throw;
  }
  stoker::tools::check_output(path, kind, true);
  stoker::tools::move_into_place(partial, path);
}

void make_data(const std::string& dir, bool quiet) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  using Layout = stoker::formats::Hdf5WriteOptions::Layout;
  struct Set {
    const char* name;
    std::uint64_t n;
    std::int64_t side;
    std::uint64_t chunk;
  };
  for (Set s : {Set{"small", 100000, 32, 256}, Set{"large", 3000, 224, 32}}) {
    auto schema = stoker::tools::image_schema(s.n, s.side);
    auto p = [&](const std::string& suffix) { return (fs::path(dir) / (std::string(s.name) + suffix)).string(); };
    auto prog = [&](const std::string& f) {
      return quiet ? std::function<void(std::uint64_t)>{} : progress_for(f, s.n, schema.bytes_per_sample());
    };
    if (!fs::exists(p(".h5"))) {
      write_whole(p(".h5"), true, [&](const std::string& to) {
        stoker::tools::write_synthetic_hdf5(to, schema, {Layout::chunked, s.chunk, 0}, prog(p(".h5")));
      });
    }
    if (std::string(s.name) == "small" && !fs::exists(p("-gzip.h5"))) {
      write_whole(p("-gzip.h5"), true, [&](const std::string& to) {
        stoker::tools::write_synthetic_hdf5(to, schema, {Layout::chunked, s.chunk, 4}, prog(p("-gzip.h5")));
      });
    }
    if (!fs::exists(p(".lmdb"))) {
      write_whole(p(".lmdb"), false,
                  [&](const std::string& to) { stoker::tools::write_synthetic_lmdb(to, schema, prog(p(".lmdb"))); });
    }
  }
}

// The demo dataset: image u8[3,32,32] and label i64, as DIR/demo.h5 (chunked) and DIR/demo.lmdb.
void write_demo(const std::string& dir, std::uint64_t samples) {
  auto schema = stoker::tools::image_schema(samples, 32);
  write_whole(dir + "/demo.h5", true, [&](const std::string& to) {
    stoker::tools::write_synthetic_hdf5(to, schema, {stoker::formats::Hdf5WriteOptions::Layout::chunked, 256, 0});
  });
  write_whole(dir + "/demo.lmdb", false,
              [&](const std::string& to) { stoker::tools::write_synthetic_lmdb(to, schema); });
}

// What to read and how the loader sees it.
void add_data_options(CLI::App& app, Args& args) {
  app.add_option("--data", args.data,
                 "HDF5 file or LMDB database to read, or a shard set: a comma-separated list, a glob ('train-*.h5', "
                 "quoted) or a directory of shards (default: a generated demo dataset)");
  app.add_option("--max-open-shards", args.max_open_shards, "Shards a worker keeps open at once")
      ->check(stoker::tools::whole_number(1))
      ->capture_default_str();
  app.add_option("--format", args.format, "Format of --data")
      ->check(CLI::IsMember({"auto", "hdf5", "lmdb"}))
      ->capture_default_str();
  app.add_option("--fields", args.fields,
                 "Fields to load, in this order (default: all, alphabetical); HDF5 fields by path, e.g. "
                 "train/images,train/labels")
      ->delimiter(',');
  app.add_option("--group", args.group, "HDF5: the group the fields are in (names relative to it)");
  app.add_option("--lmdb-keys", args.lmdb_keys,
                 "LMDB without a stoker schema whose sample is one key per field: NAME=TEMPLATE[:TYPE],... e.g. "
                 "'image=image-{:09d},label=label-{:09d}' (TYPE bytes, or a number type parsed from text: "
                 "label=label-{:09d}:i64); samples start at key index 0, or 1 where the database does");
  app.add_option("--lmdb-count-key", args.lmdb_count_key,
                 "With --lmdb-keys: a key whose value is the number of samples (e.g. num-samples), checked");
  app.add_option("--save-batch", args.save_batch,
                 "Write the first batch of each epoch into DIR as NumPy files (FIELD.npy; FIELD.bytes.npy and "
                 "FIELD.offsets.npy for a bytes field; indices.npy), to look at what the pipeline makes (CPU device)");
  app.add_option("--pipeline", args.pipeline,
                 "Per-sample operations run in the workers, 'FIELD=op,op(args),...' with fields separated by ';', "
                 "e.g. 'jpeg=decode,random_resized_crop(224),flip,to_chw'. Operations: decode[(H,W)] (decode_jpeg, "
                 "decode_png: one format only), "
                 "random_resized_crop(H[,W]), resize(H,W), resize(S) (the shorter side), center_crop(H[,W]), "
                 "flip[(p)], color_jitter(b,c,s[,h]), to_chw, "
                 "normalize(m0,m1,m2,s0,s1,s2) (docs/pipeline.md)")
      ->check(stoker::tools::pipeline_text());
  app.add_option("--max-image-pixels", args.max_image_pixels,
                 "The most pixels (height x width) an image the pipeline decodes may have; a larger one is an "
                 "error naming the sample, from its header alone (a decompression bomb costs no memory)")
      ->check(stoker::tools::whole_number(1))
      ->capture_default_str();
  app.add_option("--on-decode-error", args.on_decode_error,
                 "A sample the pipeline cannot decode: fail (the run stops, naming the file, field and sample) or "
                 "skip (its field holds zeros, the epoch keeps its batches; a warning names it, and the report "
                 "counts it)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
}

// How the loader runs: batches, workers, order, epochs.
void add_run_options(CLI::App& app, Args& args) {
  app.add_option("--batch-size", args.batch_size, "Samples per batch")
      ->check(stoker::tools::whole_number(1))
      ->capture_default_str();
  app.add_option("--workers", args.workers,
                 "Worker processes (0: load in this process), or auto: add workers while the loop waits for data "
                 "and they help")
      ->check(stoker::tools::whole_number_or_auto(0, 1024))
      ->capture_default_str();
  app.add_option("--prefetch", args.prefetch, "Batches in flight per worker, or auto (with workers)")
      ->check(stoker::tools::whole_number_or_auto(1, 1024))
      ->capture_default_str();
  auto* shuffle = app.add_flag("--shuffle", args.shuffle,
                               "Shuffle every epoch (order depends on --seed and the epoch): --order random");
  app.add_option("--order", args.order,
                 "Sample order: sequential (the default), random, or quasi-random (shuffled chunk-sized groups, "
                 "mixed within windows of a few: each chunk read about once per epoch; docs/sampler.md)")
      ->check(CLI::IsMember({"sequential", "random", "quasi-random"}))
      ->excludes(shuffle);
  app.add_option("--seed", args.seed, "Shuffle seed")->check(stoker::tools::whole_number(0))->capture_default_str();
  app.add_option("--epochs", args.epochs, "Epochs to run")
      ->check(stoker::tools::whole_number(1, 1u << 30))
      ->capture_default_str();
  app.add_flag("--drop-last", args.drop_last, "Drop the last incomplete batch");
}

// Where batches go, the ring, what is printed, and the runs that are not benchmarks.
void add_output_options(CLI::App& app, Args& args) {
  app.add_option("--device", args.device,
                 "Where batches go: cpu, cuda[:i], or emulated (the CUDA pipeline on host "
                 "memory)")
      ->check(stoker::tools::device_name())
      ->capture_default_str();
  app.add_option("--trace", args.trace,
                 "Write the run into FILE as a Chrome trace (open it in Perfetto's UI or chrome://tracing): a track "
                 "per worker with its batches and their stages, the loop's waits and steps, warnings "
                 "(docs/observability.md); the demo's two runs write it in turn, the LMDB run's is left")
      ->type_name("FILE");
  app.add_option("--staging", args.staging,
                 "CUDA staging: pinned (copy into pinned buffers), registered (copy "
                 "straight from page-locked shared memory), or auto (registered where the "
                 "slots can be page-locked, else pinned)")
      ->check(CLI::IsMember({"auto", "pinned", "registered"}))
      ->capture_default_str();
  app.add_option("--step-ms", args.step_ms,
                 "Simulate a training step of T ms per batch (a sleep on the CPU, a "
                 "spinning kernel on CUDA); stall % is then the share of the loop spent "
                 "waiting for data. Without it the step is empty, so stall % is near 100 "
                 "by construction: the loop does nothing but wait for data")
      ->check(stoker::tools::number_at_least(0));
  app.add_option("--shm-budget", args.shm_budget,
                 "Shared memory the ring may use (binary units: 512m = 512 MiB, 2g); "
                 "replaces the default of half the free /dev/shm, still capped by the "
                 "free space and the memory cgroup")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--shm-backing", args.shm_backing,
                 "Where the ring lives: auto (/dev/shm when it holds the ring, else memfd memory, which /dev/shm's "
                 "size does not limit), dev-shm or memfd")
      ->check(CLI::IsMember({"auto", "dev-shm", "memfd"}))
      ->capture_default_str();
  app.add_option("--timeout", args.timeout_s,
                 "Seconds a worker with work may make no progress while it can run before it is stuck "
                 "(killed and replaced); 0: never")
      ->check(stoker::tools::number_at_least(0))
      ->capture_default_str();
  app.add_option("--max-respawns", args.max_respawns, "Dead or stuck workers replaced in the loader's life")
      ->capture_default_str();
  app.add_option("--worker-oom-score-adj", args.worker_oom_score_adj,
                 "oom_score_adj of the workers (0-1000, never below this process's): the out-of-memory killer "
                 "then picks a worker, which is replaced, before the trainer; 0: as this process")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_flag("--json", args.json, "One JSON object per epoch instead of the table");
  app.add_flag("--digest", args.digest, "Print content_digest and order_digest of each epoch (docs/digest.md)");
  app.add_option("--make-data", args.make_data, "Write the standard benchmark datasets into DIR and exit");
  app.add_option("--make-demo", args.make_demo,
                 "Write the demo dataset (--demo-samples samples) into DIR as demo.h5 "
                 "and demo.lmdb, and exit");
  app.add_option("--max-batches", args.max_batches, "Stop each epoch after N batches (0: the whole epoch)")
      ->check(stoker::tools::whole_number(0));
  app.add_flag("--shard-from-env", args.shard_from_env,
               "Load this process's shard, with rank and world size from the launcher's variables (torchrun, Open "
               "MPI, PMI, SLURM; docs/distributed.md)");
  app.add_option("--stop-after-batches", args.stop_after_batches,
                 "Stop after K batches of the first epoch and end the run, as a preempted job would (with "
                 "--state-out, the state to resume from)")
      ->check(stoker::tools::whole_number(1));
  app.add_option("--state-out", args.state_out, "Write the loader's state (JSON, docs/sampler.md) to FILE at the end");
  app.add_option("--resume", args.resume,
                 "Resume the epoch of a state written by --state-out (any world size, batch size or workers)");
  app.add_option("--demo-samples", args.demo_samples, "Samples in the generated demo dataset")
      ->check(stoker::tools::whole_number(1))
      ->capture_default_str();
}

// The demo: a small dataset, generated, benchmarked in both formats, removed.
void run_demo(const Args& args) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "loader-bench-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw stoker::Error::from_errno(errno, tmpl);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{tmpl};
  const std::string h5 = tmpl + "/demo.h5", lmdb = tmpl + "/demo.lmdb";
  if (!args.json) {
    std::cerr << fmt::format(
        "loader-bench: no --data given; generated a demo dataset of {} samples (image u8[3,32,32], "
        "label i64) in {}\n",
        args.demo_samples, tmpl);
  }
  write_demo(tmpl, args.demo_samples);
  bench(h5, args);
  bench(lmdb, args);
}

int run(const Args& args) {
  if (!args.make_data.empty()) {
    make_data(args.make_data, args.json);
    return 0;
  }
  if (!args.make_demo.empty()) {
    std::filesystem::create_directories(args.make_demo);
    write_demo(args.make_demo, args.demo_samples);
    return 0;
  }
  if (!args.data.empty()) {
    bench(args.data, args);
    return 0;
  }
  run_demo(args);
  return 0;
}

// Everything but the catch-all: usage errors exit 2 (parse_or_exit), runtime errors 1.
int loader_bench(int argc, char** argv) {
  stoker::init(argc, argv);                                           // workers from a clean image of this program
  stoker::set_option_spelling(stoker::OptionSpelling::command_line);  // messages name --flags
  Args args;
  CLI::App app{
      "loader-bench: measures how fast stoker delivers a dataset (samples/s, MiB/s, time to first batch, wait per\n"
      "batch, stall %) and, with --digest, proves what it delivered. Without --data it generates a small demo\n"
      "dataset (HDF5 and LMDB) in a temporary directory and benchmarks both.",
      "loader-bench"};
  add_data_options(app, args);
  add_run_options(app, args);
  add_output_options(app, args);
  if (int rc = stoker::tools::parse_or_exit(app, argc, argv); rc >= 0) return rc;
  return run(args);
}

}  // namespace

int main(int argc, char** argv) { return stoker::tools::run_tool("loader-bench", loader_bench, argc, argv); }
