// stoker-gpu-check: the CUDA path measured on a real GPU (or dry-run on the emulated device).
//
// Prints, for one synthetic dataset made in a scratch directory:
//   - ceilings: single-core host memcpy, raw pinned host->device copy bandwidth;
//   - end-to-end GB/s through stoker to the device, for both staging paths;
//   - GPU idle % between steps (device events) for a spinning-kernel step in three regimes: loader
//     much faster than the step, about as fast, and slower (where starvation must show);
//   - device contents against the source (XXH64 of every batch copied back).
// With --json-out FILE it also writes the figures as JSON.
#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "formats/lmdb/lmdb_reader.h"
#include "formats/open_reader.h"
#include "loader/device/device_backend.h"
#include "loader/device/spin_kernel.h"
#include "stoker/loader.h"
#include "tools/common/synthetic_data.h"

namespace {

using Clock = std::chrono::steady_clock;
using stoker::Batch;
using stoker::Loader;
using stoker::Options;
namespace detail = stoker::detail;

double host_memcpy_gb_per_s() {
  const std::size_t bytes = 256u << 20, chunk = 8u << 20;
  std::vector<char> src(bytes, 1), dst(chunk);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    for (std::size_t off = 0; off < bytes; off += chunk) std::memcpy(dst.data(), src.data() + off, chunk);
    best = std::max(best, static_cast<double>(bytes) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9);
  }
  return best;
}

double pinned_h2d_gb_per_s(detail::DeviceBackend& be) {
  const std::size_t bytes = 64u << 20;
  void* host = be.alloc_pinned(bytes);
  std::memset(host, 1, bytes);
  std::byte* dev = be.alloc_device(bytes);
  auto s = be.create_stream();
  auto a = be.create_event(true), b = be.create_event(true);
  be.copy_to_device_async(dev, host, bytes, s);  // warm-up
  const int reps = 10;
  be.record(a, s);
  for (int i = 0; i < reps; ++i) be.copy_to_device_async(dev, host, bytes, s);
  be.record(b, s);
  be.synchronize(b);
  double gbps = static_cast<double>(bytes) * reps / be.elapsed_seconds(a, b) / 1e9;
  be.destroy_event(a);
  be.destroy_event(b);
  be.destroy_stream(s);
  be.free_device(dev);
  be.free_pinned(host);
  return gbps;
}

struct Run {
  double gb_per_s = 0, batch_ms = 0, gpu_idle_pct = 0, host_wait_pct = 0, h2d_gb_per_s = 0;
  std::uint64_t checked = 0, mismatches = 0;
  stoker::Staging staging_used = stoker::Staging::pinned_copy;
};

// One epoch to the device; a spinning step of `step_ms` per batch (0: none); with `verify`, every
// batch is copied back and hashed against the source.
Run run(const Options& base, stoker::Staging staging, double step_ms, bool verify, detail::DeviceBackend& be,
        detail::StreamHandle compute, stoker::detail::SpinKernel& step, stoker::formats::Reader* source) {
  Options o = base;
  o.staging = staging;
  Loader loader(o);
  for (Batch& b : loader.epoch(99)) b.ready_on(compute);  // warm: page cache, page tables, buffers
  be.record(be.create_event(false), compute);
  Run r;
  const stoker::Stats before = loader.stats();
  auto done = be.create_event(false);
  std::uint64_t bytes = 0, batches = 0;
  double waited = 0;
  const auto t0 = Clock::now();
  auto epoch = loader.epoch(0);
  for (;;) {
    auto w0 = Clock::now();
    auto b = epoch.next();
    waited += std::chrono::duration<double>(Clock::now() - w0).count();
    if (!b) break;
    b->ready_on(compute);
    if (step_ms > 0) step.launch(compute, step_ms);
    for (const auto& f : b->fields()) bytes += f.bytes;
    ++batches;
    if (verify) {
      be.synchronize(b->ready_event());
      std::vector<std::vector<std::byte>> want(b->fields().size());
      std::vector<std::byte*> dest;
      for (std::size_t f = 0; f < want.size(); ++f) {
        want[f].resize(b->fields()[f].bytes);
        dest.push_back(want[f].data());
      }
      source->read(b->indices(), dest);
      for (std::size_t f = 0; f < want.size(); ++f) {
        std::vector<std::byte> got(b->fields()[f].bytes);
        be.copy_to_host(got.data(), b->fields()[f].data, got.size());
        ++r.checked;
        if (XXH64(got.data(), got.size(), 0) != XXH64(want[f].data(), want[f].size(), 0)) ++r.mismatches;
      }
    }
    be.record(done, compute);
    be.synchronize(done);  // a loop that reads its loss every step
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  be.destroy_event(done);
  const stoker::Stats after = loader.stats();
  r.gb_per_s = static_cast<double>(bytes) / seconds / 1e9;
  r.batch_ms = 1e3 * seconds / static_cast<double>(batches);
  double span = after.gpu_span_seconds - before.gpu_span_seconds;
  r.gpu_idle_pct = span > 0 ? 100.0 * (after.gpu_wait_seconds - before.gpu_wait_seconds) / span : 0;
  r.host_wait_pct = 100.0 * waited / seconds;
  double h2d = after.h2d_seconds - before.h2d_seconds;
  r.staging_used = after.staging;
  r.h2d_gb_per_s = h2d > 0 ? static_cast<double>(after.h2d_bytes - before.h2d_bytes) / h2d / 1e9 : 0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stoker-gpu-check: the CUDA staging path measured on a GPU (see tests/gpu/check.sh)",
               "stoker-gpu-check"};
  std::string device = "cuda:0", json_out, scratch_dir = std::filesystem::temp_directory_path().string();
  std::uint64_t samples = 4000;
  std::int64_t side = 224;
  std::size_t workers = std::max<long>(1, std::min<long>(8, ::sysconf(_SC_NPROCESSORS_ONLN) / 2));
  std::size_t batch_size = 32;
  app.add_option("--device", device, "cuda:N, or emulated for a dry run without a GPU")->capture_default_str();
  app.add_option("--samples", samples, "Samples in the synthetic dataset")->capture_default_str();
  app.add_option("--side", side, "Image side (image u8[3,side,side] + label i64)")->capture_default_str();
  app.add_option("--workers", workers, "Worker processes")->capture_default_str();
  app.add_option("--batch-size", batch_size, "Samples per batch")->capture_default_str();
  app.add_option("--scratch", scratch_dir, "Directory for the synthetic dataset")->capture_default_str();
  app.add_option("--json-out", json_out, "Also write the figures to this JSON file");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json out;
  try {
    const stoker::Device dev = stoker::Device::parse(device);
    auto backend = detail::make_device_backend(dev);  // throws when there is no driver or device
    backend->bind_thread();
    std::filesystem::create_directories(scratch_dir);
    const std::string data =
        (std::filesystem::path(scratch_dir) / fmt::format("gpu-check-{}.lmdb", ::getpid())).string();
    struct Cleanup {
      std::string path;
      ~Cleanup() { std::filesystem::remove(path); }
    } cleanup{data};
    auto schema = stoker::tools::image_schema(samples, side);
    stoker::tools::write_synthetic_lmdb(data, schema);
    auto source = stoker::formats::open_reader(data, {});

    out["device"] = dev.str();
    out["dataset"] = {{"samples", samples},
                      {"bytes_per_sample", schema.bytes_per_sample()},
                      {"batch_size", batch_size},
                      {"workers", workers}};
    out["host_memcpy_gb_per_s"] = host_memcpy_gb_per_s();
    out["pinned_h2d_gb_per_s"] = pinned_h2d_gb_per_s(*backend);
    fmt::print("device {}: {} samples of {} bytes, batch {}, {} workers\n", dev.str(), samples,
               schema.bytes_per_sample(), batch_size, workers);
    fmt::print("ceilings: host memcpy (1 core) {:.2f} GB/s, pinned H2D {:.2f} GB/s\n",
               out["host_memcpy_gb_per_s"].get<double>(), out["pinned_h2d_gb_per_s"].get<double>());

    Options o;
    o.source = data;
    o.batch_size = batch_size;
    o.num_workers = workers;
    o.prefetch = 4;
    o.shuffle = true;
    o.device = dev;
    auto compute = backend->create_stream();
    stoker::detail::SpinKernel step(dev);

    double load_ms = 0;
    for (auto [name, staging] : {std::pair{"pinned_copy", stoker::Staging::pinned_copy},
                                 {"registered_shm", stoker::Staging::registered_shm}}) {
      Run r = run(o, staging, 0, false, *backend, compute, step, nullptr);
      const bool fell_back = r.staging_used != staging;
      out["end_to_end"][name] = {{"gb_per_s", r.gb_per_s},
                                 {"batch_ms", r.batch_ms},
                                 {"h2d_gb_per_s", r.h2d_gb_per_s},
                                 {"fell_back_to_pinned_copy", fell_back}};
      if (fell_back) {
        fmt::print("end to end, {}: the slots could not be page-locked, so this row measured pinned_copy\n", name);
      }
      fmt::print(
          "end to end, {:<15} {:.2f} GB/s ({:.0f}% of pinned H2D, {:.0f}% of host memcpy), {:.2f} ms/batch, "
          "copy engine {:.2f} GB/s\n",
          name, r.gb_per_s, 100 * r.gb_per_s / out["pinned_h2d_gb_per_s"].get<double>(),
          100 * r.gb_per_s / out["host_memcpy_gb_per_s"].get<double>(), r.batch_ms, r.h2d_gb_per_s);
      if (load_ms == 0 || r.batch_ms < load_ms) load_ms = r.batch_ms;
    }

    for (auto [regime, factor] :
         {std::pair{"loader_much_faster", 8.0}, {"loader_about_step_rate", 1.0}, {"loader_slower", 0.25}}) {
      double step_ms = load_ms * factor;
      Run r = run(o, stoker::Staging::pinned_copy, step_ms, false, *backend, compute, step, nullptr);
      out["gpu_idle"][regime] = {
          {"step_ms", step_ms}, {"gpu_idle_pct", r.gpu_idle_pct}, {"host_wait_pct", r.host_wait_pct}};
      fmt::print("gpu idle, {:<23} step {:6.2f} ms: GPU idle {:5.1f}% between steps (events), host waited {:5.1f}%\n",
                 regime, step_ms, r.gpu_idle_pct, r.host_wait_pct);
    }

    std::uint64_t checked = 0, mismatches = 0;
    for (auto staging : {stoker::Staging::pinned_copy, stoker::Staging::registered_shm}) {
      Run r = run(o, staging, 0, true, *backend, compute, step, source.get());
      checked += r.checked;
      mismatches += r.mismatches;
    }
    out["checksum"] = {{"arrays_checked", checked}, {"mismatches", mismatches}};
    fmt::print("checksum: {} field arrays copied back from the device, {} differ from the source\n", checked,
               mismatches);
    backend->destroy_stream(compute);
    if (!json_out.empty()) std::ofstream(json_out) << out.dump(2) << "\n";
    return mismatches == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "stoker-gpu-check: " << e.what() << std::endl;
    return 2;
  }
}
