// stoker-order-bench: the shuffled order of a dataset far too large for a table of its order. Writes
// a chunked HDF5 file that claims --log2-samples samples (2^32 by default: no chunk is ever written,
// so the file is a few KiB and reads as the fill value), then measures, in this process (the
// trainer), the time from constructing a Loader with a shuffled order to its first batch, and the
// anonymous memory (RssAnon) and peak resident memory (VmHWM) the loader added: a table of the
// order would be 8 bytes per sample, 32 GiB for 2^32. Prints one JSON object.
//   stoker-order-bench [--dir DIR] [--log2-samples 32] [--order random|quasi-random] [--workers 2]
//                      [--batch-size 256]
#include <fmt/format.h>
#include <hdf5.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "stoker/loader.h"

namespace {

using Clock = std::chrono::steady_clock;

// A field of /proc/self/status in KiB ("RssAnon", "VmHWM").
std::uint64_t status_kib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoull(line.substr(key.size() + 1));
  }
  return 0;
}

void check(herr_t rc, const char* what) {
  if (rc < 0) throw std::runtime_error(fmt::format("stoker-order-bench: {} failed", what));
}

hid_t check_id(hid_t id, const char* what) {
  if (id < 0) throw std::runtime_error(fmt::format("stoker-order-bench: {} failed", what));
  return id;
}

// An image field u8[16] and a label i64, chunked by 65536 rows, never written.
void write_claiming_file(const std::string& path, std::uint64_t n) {
  const hid_t file = check_id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "H5Fcreate");
  auto add = [&](const char* name, hid_t type, int rank, const hsize_t* dims, const hsize_t* chunk) {
    const hid_t space = check_id(H5Screate_simple(rank, dims, nullptr), "H5Screate_simple");
    const hid_t dcpl = check_id(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate");
    check(H5Pset_chunk(dcpl, rank, chunk), "H5Pset_chunk");
    const hid_t dset = check_id(H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), name);
    H5Dclose(dset);
    H5Pclose(dcpl);
    H5Sclose(space);
  };
  const hsize_t image_dims[2] = {n, 16}, image_chunk[2] = {65536, 16};
  const hsize_t label_dims[1] = {n}, label_chunk[1] = {65536};
  add("image", H5T_NATIVE_UINT8, 2, image_dims, image_chunk);
  add("label", H5T_NATIVE_INT64, 1, label_dims, label_chunk);
  check(H5Fclose(file), "H5Fclose");
}

int run(int argc, char** argv) {
  CLI::App app{"stoker-order-bench: the first shuffled batch of a dataset of 2^32 samples, and its memory"};
  std::string dir = "/tmp";
  int log2_samples = 32;
  std::string order = "random";
  std::size_t workers = 2, batch = 256;
  app.add_option("--dir", dir, "where the claiming HDF5 file is written (a few KiB)");
  app.add_option("--log2-samples", log2_samples, "the file claims 2^N samples")->check(CLI::Range(1, 40));
  app.add_option("--order", order, "random or quasi-random")->check(CLI::IsMember({"random", "quasi-random"}));
  app.add_option("--workers", workers, "worker processes (0: the calling thread)");
  app.add_option("--batch-size", batch, "samples per batch");
  CLI11_PARSE(app, argc, argv);
  {
    const std::uint64_t n = std::uint64_t{1} << log2_samples;
    const std::string path = fmt::format("{}/stoker-order-bench-{}.h5", dir, getpid());
    write_claiming_file(path, n);

    stoker::Options o;
    o.source = path;
    o.batch_size = batch;
    o.num_workers = workers;
    o.shuffle = true;
    o.order = order == "random" ? stoker::Order::random : stoker::Order::quasi_random;
    o.seed = 42;
    const std::uint64_t anon_before = status_kib("RssAnon"), hwm_before = status_kib("VmHWM");
    const auto t0 = Clock::now();
    std::set<std::uint64_t> distinct;
    std::uint64_t first_index = 0, max_index = 0, got = 0;
    double construct_s = 0, first_batch_s = 0;
    {
      stoker::Loader loader(o);
      construct_s = std::chrono::duration<double>(Clock::now() - t0).count();
      stoker::Epoch epoch = loader.epoch(0);
      auto b = epoch.next();
      first_batch_s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!b) throw std::runtime_error("stoker-order-bench: no first batch");
      got = b->size();
      for (std::size_t k = 0; k < b->size(); ++k) {
        distinct.insert(b->indices()[k]);
        max_index = std::max(max_index, b->indices()[k]);
      }
      first_index = b->indices()[0];
      const std::uint64_t anon_after = status_kib("RssAnon"), hwm_after = status_kib("VmHWM");
      nlohmann::json j = {
          {"samples", n},
          {"order", order},
          {"workers", workers},
          {"batch_size", batch},
          {"construct_s", construct_s},
          {"first_batch_s", first_batch_s},
          {"batch_samples", got},
          {"distinct_in_batch", distinct.size()},
          {"first_index", first_index},
          {"max_index", max_index},
          {"rss_anon_added_mib", (static_cast<double>(anon_after) - static_cast<double>(anon_before)) / 1024.0},
          {"peak_rss_added_mib", (static_cast<double>(hwm_after) - static_cast<double>(hwm_before)) / 1024.0},
          {"table_would_need_mib", static_cast<double>(n) * 8 / (1024.0 * 1024)}};
      std::cout << j.dump() << '\n';
    }
    std::remove(path.c_str());
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << e.what() << '\n';
  } catch (...) {
    std::cerr << "stoker-order-bench: an unknown exception\n";
  }
  return 1;
}
