// loader-bench: how fast stoker delivers a dataset, epoch by epoch, and proof of what it delivered.
#include <fmt/format.h>
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
#include <sstream>
#include <thread>

#include "formats/core/npy.h"
#include "stoker/device_stream.h"
#include "stoker/digest.h"
#include "stoker/init.h"
#include "stoker/loader.h"
#include "stoker/state.h"
#include "tools/common/atomic_output.h"
#include "tools/common/cli.h"
#include "tools/common/demo_data.h"
#include "tools/loader_bench/bench_args.h"
#include "tools/loader_bench/epoch_report.h"

namespace {

using Clock = std::chrono::steady_clock;
// One system of units throughout: binary (MiB = 2^20 bytes), as the library's messages use.
constexpr double kMiB = 1024.0 * 1024, kGiB = kMiB * 1024;
using stoker::Batch;
using stoker::Loader;
using stoker::Options;
using stoker::tools::Args;
using stoker::tools::EpochResult;

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
  const Options o = args.loader_options(path);
  Loader loader(o);
  if (!args.write_index.empty()) {
    const std::string where = loader.write_index(args.write_index);
    std::cout << fmt::format("wrote the index of {} ({} samples) to {}\n", path, loader.schema().num_samples, where);
    return;
  }
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
      stoker::tools::print_header();
    }
  }
  std::uint64_t first = resume ? resume->epoch : 0;
  for (std::uint64_t e = first; e < first + static_cast<std::uint64_t>(args.epochs); ++e) {
    EpochResult r = run_epoch(loader, e, e == first ? resume : std::nullopt, e == first ? args.stop_after_batches : 0,
                              args, device.get());
    if (e == first && resume) r.resumed_from = resume->consumed;
    stoker::tools::report(path, e, r, loader, args);
    if (r.stopped) break;  // a preempted job: nothing more runs
  }
  if (!args.state_out.empty()) write_state(args.state_out, loader.state());
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
  stoker::tools::write_demo(tmpl, args.demo_samples);
  bench(h5, args);
  bench(lmdb, args);
}

int run(const Args& args) {
  if (!args.make_data.empty()) {
    stoker::tools::write_bench_data(args.make_data, args.json);
    return 0;
  }
  if (!args.make_demo.empty()) {
    std::filesystem::create_directories(args.make_demo);
    stoker::tools::write_demo(args.make_demo, args.demo_samples);
    return 0;
  }
  if (!args.data.empty() || !args.mix.empty()) {
    bench(args.data_name(), args);
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
  stoker::tools::add_bench_options(app, args);
  if (int rc = stoker::tools::parse_or_exit(app, argc, argv); rc >= 0) return rc;
  return run(args);
}

}  // namespace

int main(int argc, char** argv) { return stoker::tools::run_tool("loader-bench", loader_bench, argc, argv); }
