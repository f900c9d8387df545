// loader-bench's command line: what it reads, how the loader runs, where batches go and what is
// printed. Each flag's text is its --help.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stoker/options.h"

namespace stoker::tools {

// loader-bench's own defaults where they are not the library's: batches of 256 samples and two
// workers, as a benchmark of a loader with workers wants.
inline Options bench_defaults() {
  Options o;
  o.batch_size = 256;
  return o;
}

struct Args {
  // The Loader's options. A flag that sets one writes it here, so that its default is the
  // library's own (stoker::Options, or bench_defaults()), which --help shows.
  Options options = bench_defaults();
  // The flags that are options once read: the dataset (a path, a shard list, or none: the demo),
  // the workers and prefetch (a number, or "auto"), the device, times in seconds, the shard.
  std::string data;
  std::vector<std::string> mix;  // --mix WEIGHT:PATH, in order
  std::string workers = "2";
  std::string prefetch = std::to_string(Options{}.prefetch);
  std::string device = "cpu";
  double timeout_s = seconds_of(Options{}.timeout);
  double shutdown_grace_s = seconds_of(Options{}.shutdown_grace);
  double fetch_timeout_s = seconds_of(Options{}.fetch_timeout);
  bool shard_from_env = false;
  // loader-bench's own.
  std::string save_batch;
  int epochs = 2;
  double step_ms = 0;
  bool json = false;
  bool digest = false;
  std::string make_data;
  std::string make_demo;
  std::string write_index;
  std::uint64_t demo_samples = 100000;
  std::uint64_t max_batches = 0;
  std::uint64_t stop_after_batches = 0;
  std::string state_out;
  std::string resume;

  static double seconds_of(std::chrono::milliseconds d) { return static_cast<double>(d.count()) / 1000.0; }
  // The Loader's options for the dataset at `path` (ignored for a --mix), every flag applied.
  Options loader_options(const std::string& path) const;
  // How the report names what is read: --data, or the mix as "mix(3:web/,1:books.h5)".
  std::string data_name() const;
};

// Adds every flag of loader-bench to `app`, each writing into `args`.
void add_bench_options(CLI::App& app, Args& args);

}  // namespace stoker::tools
