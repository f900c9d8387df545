// stoker-ceilings: the physical limits stoker's throughput is judged against, measured in the
// same run as the comparison.
//   --memcpy            memcpy bandwidth from a page-cache-sized buffer into a reused one, in 1 .. --procs
//                       concurrent processes (the ceiling for that many workers copying at once)
//   --lmdb PATH         random mdb_get + memcpy into a reused buffer, in --procs concurrent processes;
//                       with --dest-bytes N, the copies go one after another through a buffer of N
//                       bytes (as a loader's ring of slots takes them) instead of into one record's
//   --inflate FILE.h5   every chunk of every gzip-compressed dataset read raw and inflated once, in order,
//                       with libdeflate (what stoker uses), on one core: samples/s per core
//   --random-read FILE  every --record-bytes record of the file read once, in a shuffled order, by
//                       --depth threads at once (pread: as many reads in flight): the storage's random
//                       read bandwidth for records of that size (drop the page cache first to measure
//                       the storage rather than memory)
// Prints one JSON object.
#include <fcntl.h>
#include <fmt/format.h>
#include <hdf5.h>
#include <libdeflate.h>
#include <lmdb.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "base/splitmix64.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_reader.h"

namespace {

using Clock = std::chrono::steady_clock;

double memcpy_gib_per_s() {
  const std::size_t src_bytes = 512u << 20, chunk = 4u << 20;  // a source larger than any cache
  std::vector<char> src(src_bytes, 1), dst(chunk);
  for (std::size_t i = 0; i < src_bytes; i += 4096) src[i] = static_cast<char>(i);
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    for (std::size_t off = 0; off < src_bytes; off += chunk) {
      std::memcpy(dst.data(), src.data() + off, chunk);
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(src_bytes) / s / (1024.0 * 1024 * 1024));
  }
  return best;
}

// Random gets for `seconds` in this process; returns samples read.
// memcpy in `procs` processes at once; their bandwidths added.
double memcpy_gib_per_s_in(int procs) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe");
  for (int p = 0; p < procs; ++p) {
    if (::fork() == 0) {
      double g = memcpy_gib_per_s();
      (void)!::write(fds[1], &g, sizeof g);
      ::_exit(0);
    }
  }
  double total = 0;
  for (int p = 0; p < procs; ++p) {
    double g = 0;
    if (::read(fds[0], &g, sizeof g) == sizeof g) total += g;
  }
  while (::wait(nullptr) > 0) {
  }
  ::close(fds[0]);
  ::close(fds[1]);
  return total;
}

// Inflates every chunk of every deflate-compressed dataset of `path` once, in storage order, on
// this core; returns {samples, seconds}: the most any loader can deliver per core from that file.
std::pair<std::uint64_t, double> inflate_all(const std::string& path) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  // Inflating every dataset's chunks in turn: the time for all fields of all samples.
  if (file < 0) throw std::runtime_error(path + ": cannot open");
  std::uint64_t samples = 0;
  double seconds = 0;
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  auto visit = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  std::vector<std::string> names;
  H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, nullptr, visit, &names);
  for (const auto& name : names) {
    hid_t dset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(dset);
    hid_t space = H5Dget_space(dset);
    const int rank = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(static_cast<std::size_t>(rank)), chunk(static_cast<std::size_t>(rank));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    if (H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_nfilters(dcpl) > 0) {
      H5Pget_chunk(dcpl, rank, chunk.data());
      hid_t type = H5Dget_type(dset);
      std::size_t chunk_bytes = H5Tget_size(type);
      for (auto c : chunk) chunk_bytes *= c;
      H5Tclose(type);
      std::vector<char> raw, out(chunk_bytes);
      hsize_t nchunks = 0;
      if (H5Dget_num_chunks(dset, space, &nchunks) < 0) throw std::runtime_error(path + ": counting chunks of " + name);
      std::vector<hsize_t> offset(static_cast<std::size_t>(rank), 0);
      const auto t0 = Clock::now();
      for (hsize_t k = 0; k < nchunks; ++k) {
        unsigned mask = 0;
        haddr_t addr = 0;
        hsize_t size = 0;
        if (H5Dget_chunk_info(dset, space, k, offset.data(), &mask, &addr, &size) < 0) {
          throw std::runtime_error(path + ": locating a chunk of " + name);
        }
        raw.resize(size);
        std::uint32_t filters = 0;
        if (H5Dread_chunk(dset, H5P_DEFAULT, offset.data(), &filters, raw.data()) < 0) {
          throw std::runtime_error(path + ": reading a chunk of " + name);
        }
        std::size_t got = 0;
        if (libdeflate_zlib_decompress(d, raw.data(), size, out.data(), out.size(), &got) != LIBDEFLATE_SUCCESS) {
          throw std::runtime_error(path + ": a chunk of " + name + " does not inflate");
        }
      }
      seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      samples = std::max<std::uint64_t>(samples, dims[0]);
    }
    H5Sclose(space);
    H5Pclose(dcpl);
    H5Dclose(dset);
  }
  libdeflate_free_decompressor(d);
  H5Fclose(file);
  return {samples, seconds};
}

// Reads every `record`-byte record of `path` once, shuffled, `depth` reads at a time; MiB/s.
double random_read_mib_per_s(const std::string& path, std::size_t record, int depth) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  const off_t size = ::lseek(fd, 0, SEEK_END);
  const std::size_t n = static_cast<std::size_t>(size) / record;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);  // the records asked for, not the kernel's guess around them
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(1));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const auto t0 = Clock::now();
  std::vector<std::thread> readers;
  for (int t = 0; t < depth; ++t) {
    readers.emplace_back([&] {
      std::vector<char> buf(record);
      for (std::size_t i; (i = next.fetch_add(1)) < n;) {
        if (::pread(fd, buf.data(), record, static_cast<off_t>(order[i] * record)) != static_cast<ssize_t>(record)) {
          failed = true;
        }
      }
    });
  }
  for (auto& r : readers) r.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ::close(fd);
  if (failed) throw std::runtime_error(path + ": a read failed");
  return static_cast<double>(n * record) / seconds / (1024.0 * 1024);
}

std::uint64_t lmdb_loop(const std::string& path, double seconds, std::uint64_t seed, std::size_t dest_bytes) {
  auto stored = stoker::formats::lmdb_stored_schema(path);
  const std::uint64_t n = stored.schema.num_samples;
  stoker::formats::LmdbEnv env;
  mdb_env_set_maxdbs(env.get(), 4);
  stoker::formats::check_mdb(
      mdb_env_open(env.get(), path.c_str(), MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK | MDB_NORDAHEAD | MDB_NOTLS, 0644),
      path);
  MDB_txn* txn;
  stoker::formats::check_mdb(mdb_txn_begin(env.get(), nullptr, MDB_RDONLY, &txn), path);
  MDB_dbi dbi;
  stoker::formats::check_mdb(mdb_dbi_open(txn, stoker::formats::kSamplesDb, 0, &dbi), path);
  const std::size_t record = stored.schema.bytes_per_sample();
  std::vector<char> dest(std::max(dest_bytes / record, std::size_t{1}) * record);
  std::size_t at = 0;  // where the next copy goes in dest
  const auto copy = [&](const MDB_val& v) {
    std::memcpy(dest.data() + at, v.mv_data, std::min(v.mv_size, record));
    at = at + record == dest.size() ? 0 : at + record;
  };
  stoker::detail::SplitMix64 rng(seed);
  std::uint64_t count = 0;
  // One untimed pass in key order first: this process's page tables, as a loader's warm epoch has.
  for (std::uint64_t i = 0; i < n; ++i) {
    unsigned char key[8];
    stoker::formats::encode_key(i, key);
    MDB_val kv{8, key}, v;
    if (mdb_get(txn, dbi, &kv, &v) != 0) return 0;
    copy(v);
  }
  auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    for (int k = 0; k < 256; ++k, ++count) {
      unsigned char key[8];
      stoker::formats::encode_key(rng.next() % n, key);
      MDB_val kv{8, key}, v;
      if (mdb_get(txn, dbi, &kv, &v) != 0) return count;
      copy(v);
    }
  }
  mdb_txn_abort(txn);
  return count;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"stoker-ceilings: physical limits measured in this run (JSON)", "stoker-ceilings"};
  bool memcpy_flag = false;
  std::string lmdb;
  int procs = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  double seconds = 2;
  app.add_flag("--memcpy", memcpy_flag, "Measure memcpy bandwidth in 1 .. --procs concurrent processes");
  app.add_option("--lmdb", lmdb, "Measure random mdb_get + memcpy on this stoker LMDB database");
  app.add_option("--procs", procs, "Concurrent processes for --lmdb (and the most for --memcpy)")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "Duration of the --lmdb loop")->capture_default_str();
  std::size_t dest_bytes = 0;
  app.add_option("--dest-bytes", dest_bytes,
                 "For --lmdb: copy through a buffer of this many bytes, a record after another (default: one record)");
  std::string inflate;
  app.add_option("--inflate", inflate, "Measure inflating every gzip chunk of this HDF5 file once, on one core");
  std::string random_read;
  std::size_t record_bytes = 0;
  int depth = 32;
  app.add_option("--random-read", random_read,
                 "Measure reading every --record-bytes record of this file once, shuffled");
  app.add_option("--record-bytes", record_bytes, "Record size for --random-read")->check(CLI::PositiveNumber);
  app.add_option("--depth", depth, "Reads in flight (threads) for --random-read")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (!random_read.empty() && record_bytes == 0) {
    std::cerr << "stoker-ceilings: --random-read needs --record-bytes" << std::endl;
    return 2;
  }
  nlohmann::json out;
  try {
    if (memcpy_flag) {
      for (int p = 1; p <= procs; ++p) out["memcpy_gib_per_s"][std::to_string(p)] = memcpy_gib_per_s_in(p);
    }
    if (!inflate.empty()) {
      inflate_all(inflate);  // once to warm the page cache
      auto [samples, secs] = inflate_all(inflate);
      out["inflate_samples_per_s_per_core"] = static_cast<double>(samples) / secs;
    }
    if (!random_read.empty()) {
      out["random_read_mib_per_s"] = random_read_mib_per_s(random_read, record_bytes, depth);
      out["random_read_depth"] = depth;
    }
    if (!lmdb.empty()) {
      int fds[2];
      if (::pipe(fds) != 0) throw std::runtime_error("pipe");
      for (int p = 0; p < procs; ++p) {
        if (::fork() == 0) {
          std::uint64_t c = lmdb_loop(lmdb, seconds, static_cast<std::uint64_t>(p) + 1, dest_bytes);
          (void)!::write(fds[1], &c, sizeof c);
          ::_exit(0);
        }
      }
      std::uint64_t total = 0;
      for (int p = 0; p < procs; ++p) {
        std::uint64_t c = 0;
        if (::read(fds[0], &c, sizeof c) == sizeof c) total += c;
      }
      while (::wait(nullptr) > 0) {
      }
      auto stored = stoker::formats::lmdb_stored_schema(lmdb);
      double sps = static_cast<double>(total) / seconds;
      out["lmdb_procs"] = procs;
      const std::size_t record = stored.schema.bytes_per_sample();
      out["lmdb_dest_bytes"] = std::max(dest_bytes / record, std::size_t{1}) * record;  // as lmdb_loop sizes it
      out["lmdb_samples_per_s"] = sps;
      out["lmdb_mib_per_s"] = sps * static_cast<double>(stored.schema.bytes_per_sample()) / (1024.0 * 1024);
    }
  } catch (const std::exception& e) {
    std::cerr << "stoker-ceilings: " << e.what() << std::endl;
    return 1;
  }
  std::cout << out.dump() << std::endl;
  return 0;
}
