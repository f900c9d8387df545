// stoker-image-ceiling: what an image pipeline of random crops costs against its decode alone.
//
// Reads every value of a py-lmdb database of JPEGs into memory, then, on one core, over the same
// images with the same crop regions (sample i of epoch 0, seed --seed):
//   ceiling   the decode alone: each image's header, random_resized_crop's region, and that region
//             decoded by libjpeg-turbo at the smallest DCT scale that still covers --size x --size
//             (jpeg_crop_scanline + jpeg_skip_scanlines + scale_num/8): no resize, no copy after it;
//   pipeline  stoker's `image=decode,random_resized_crop(SIZE),flip,to_chw` as a worker runs it,
//             into a batch-sized buffer, with the time of each of its stages.
// Both are timed in CPU time (CLOCK_THREAD_CPUTIME_ID), in --rounds alternating rounds of one pass
// each; the best round of each counts. With --procs N the ceiling is also run in N processes at
// once (their samples/s added: the most N workers can decode).
// With --regions FILE, each image's region (x, y, width, height in its pixels) and whether it is
// flipped are written there as JSON, for a peer to crop the same.
// Prints one JSON object.
#include <lmdb.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/image/image_decode.h"
#include "formats/lmdb/lmdb_env.h"
#include "loader/pipeline/ops/image_ops.h"
#include "loader/pipeline/pipeline.h"

namespace {

using stoker::formats::check_mdb;

std::vector<std::vector<std::byte>> read_values(const std::string& path) {
  stoker::formats::LmdbEnv env;
  check_mdb(mdb_env_open(env.get(), path.c_str(), MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0644), path);
  MDB_txn* txn;
  check_mdb(mdb_txn_begin(env.get(), nullptr, MDB_RDONLY, &txn), path);
  MDB_dbi dbi;
  check_mdb(mdb_dbi_open(txn, nullptr, 0, &dbi), path);
  MDB_cursor* cursor;
  check_mdb(mdb_cursor_open(txn, dbi, &cursor), path);
  std::vector<std::vector<std::byte>> out;
  MDB_val k, v;
  for (int rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST); rc == 0; rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT)) {
    const auto* p = static_cast<const std::byte*>(v.mv_data);
    out.emplace_back(p, p + v.mv_size);
  }
  mdb_cursor_close(cursor);
  mdb_txn_abort(txn);
  if (out.empty()) throw std::runtime_error(path + ": no records");
  return out;
}

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

constexpr std::size_t kField = 0;
constexpr std::uint64_t kEpoch = 0;

// One pass of the decode alone; returns CPU seconds.
double ceiling_pass(const std::vector<std::vector<std::byte>>& images, int size, std::uint64_t seed,
                    std::vector<std::byte>& pixels, std::vector<std::byte>& scratch) {
  using namespace stoker::formats;
  const double t0 = thread_cpu_seconds();
  for (std::size_t i = 0; i < images.size(); ++i) {
    const ImageInfo info = image_info(images[i], std::uint64_t{1} << 40);
    stoker::SampleRandom random = stoker::detail::sample_random(seed, kEpoch, i, kField);
    const Region region = stoker::detail::random_resized_crop_region(info.height, info.width, random);
    const DecodePlan plan = plan_decode(info, region, size, size);
    pixels.resize(static_cast<std::size_t>(plan.width) * static_cast<std::size_t>(plan.height) * 3);
    decode_region(images[i], info, region, plan, pixels.data(), scratch);
  }
  return thread_cpu_seconds() - t0;
}

double pipeline_pass(const std::vector<std::vector<std::byte>>& images, stoker::detail::SamplePipelines& pipelines,
                     std::vector<std::byte>& out) {
  const std::size_t sample = pipelines.output().fields[kField].bytes_per_sample(), per_batch = 64;
  out.resize(sample * per_batch);
  const double t0 = thread_cpu_seconds();
  for (std::size_t i = 0; i < images.size(); ++i) {
    pipelines.run(kField, images[i], kEpoch, i, out.data() + (i % per_batch) * sample);
  }
  return thread_cpu_seconds() - t0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stoker-image-ceiling: an image pipeline of random crops against its decode alone (JSON)",
               "stoker-image-ceiling"};
  std::string db;
  int size = 224, rounds = 3, procs = 1;
  std::uint64_t seed = 1;
  app.add_option("--lmdb", db, "A py-lmdb database whose values are JPEG images")->required();
  app.add_option("--size", size, "The crop's output size")->capture_default_str()->check(CLI::Range(1, 65536));
  app.add_option("--rounds", rounds, "Alternating rounds of each (the best counts)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--procs", procs, "Also run the ceiling in this many processes at once")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "The pipeline's seed (the crops' regions)")->capture_default_str();
  std::string regions;
  app.add_option("--regions", regions, "Write each image's region and flip here (JSON)");
  CLI11_PARSE(app, argc, argv);
  nlohmann::json out;
  try {
    const auto images = read_values(db);
    const std::string text = "image=decode,random_resized_crop(" + std::to_string(size) + "),flip,to_chw";
    stoker::Schema schema;
    schema.num_samples = images.size();
    schema.fields.push_back(stoker::Field::bytes_field("image"));
    stoker::detail::SamplePipelines pipelines(text, schema, seed, stoker::detail::OpLimits{});
    std::vector<std::byte> pixels, scratch, batch;
    ceiling_pass(images, size, seed, pixels, scratch);  // warm: buffers at their largest, code in cache
    pipeline_pass(images, pipelines, batch);
    pipelines.reset_stage_ns();
    double best_ceiling = 1e300, best_pipeline = 1e300;
    std::vector<std::uint64_t> best_stages;
    for (int r = 0; r < rounds; ++r) {
      best_ceiling = std::min(best_ceiling, ceiling_pass(images, size, seed, pixels, scratch));
      const double p = pipeline_pass(images, pipelines, batch);
      if (p < best_pipeline) {
        best_pipeline = p;
        best_stages.assign(pipelines.stage_ns().begin(), pipelines.stage_ns().end());
      }
      pipelines.reset_stage_ns();
    }
    const double n = static_cast<double>(images.size());
    out["images"] = images.size();
    out["pipeline"] = text;
    out["ceiling_samples_per_cpu_s"] = n / best_ceiling;
    out["pipeline_samples_per_cpu_s"] = n / best_pipeline;
    out["pipeline_of_ceiling"] = best_ceiling / best_pipeline;
    const auto names = pipelines.stage_names();
    for (std::size_t s = 0; s < names.size() && s < best_stages.size(); ++s) {
      out["pipeline_stage_seconds"][names[s]] = static_cast<double>(best_stages[s]) * 1e-9;
    }
    if (!regions.empty()) {
      // The draws of the pipeline's operations in order: random_resized_crop's, then flip's (p 0.5).
      nlohmann::json list = nlohmann::json::array();
      for (std::size_t i = 0; i < images.size(); ++i) {
        const auto info = stoker::formats::image_info(images[i], std::uint64_t{1} << 40);
        stoker::SampleRandom random = stoker::detail::sample_random(seed, kEpoch, i, kField);
        const auto r = stoker::detail::random_resized_crop_region(info.height, info.width, random);
        list.push_back({r.x, r.y, r.width, r.height, random.uniform() < 0.5});
      }
      std::ofstream f(regions);
      f << list.dump();
      if (!f.flush()) throw std::runtime_error(regions + ": cannot write");
    }
    if (procs > 1) {
      // Each process decodes every image once, all at the same time: their rates added.
      int fds[2];
      if (::pipe(fds) != 0) throw std::runtime_error("pipe");
      const auto start = std::chrono::steady_clock::now();
      for (int p = 0; p < procs; ++p) {
        const pid_t child = ::fork();
        if (child < 0) throw std::runtime_error("fork");
        if (child == 0) {
          int status = 0;
          try {
            ceiling_pass(images, size, seed, pixels, scratch);
            const double rate = n / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            (void)!::write(fds[1], &rate, sizeof rate);
          } catch (const std::exception& e) {
            std::cerr << "stoker-image-ceiling: a decoding process: " << e.what() << std::endl;
            status = 1;
          }
          ::_exit(status);
        }
      }
      ::close(fds[1]);  // a child that ends without writing ends the reads below
      double total = 0;
      int reported = 0;
      for (double rate = 0; ::read(fds[0], &rate, sizeof rate) == sizeof rate; ++reported) total += rate;
      while (::wait(nullptr) > 0) {
      }
      ::close(fds[0]);
      if (reported != procs) throw std::runtime_error("a decoding process failed");
      out["ceiling_procs"] = procs;
      out["ceiling_samples_per_s"] = total;
    }
  } catch (const std::exception& e) {
    std::cerr << "stoker-image-ceiling: " << e.what() << std::endl;
    return 1;
  }
  std::cout << out.dump() << std::endl;
  return 0;
}
