// What the tests of remote shards share: the fault server (tests/remote/fault_server.py) the test
// starts on 127.0.0.1, a set of three HDF5 shards it serves, and the epochs read from it and from
// the same shards locally.
#pragma once

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "formats/hdf5/hdf5_writer.h"
#include "remote/http_fetch.h"
#include "stoker/loader.h"
#include "tests/support/run_process.h"
#include "tests/support/test_data.h"

namespace stoker::test {

// The fault server on `root`, stopped (and reaped) with this object.
class FaultServer {
 public:
  FaultServer(const TempDir& tmp, const std::string& root, const std::string& faults = "{}")
      : port_file_(tmp.path("port")), log_(tmp.path("requests.log")) {
    std::filesystem::remove(port_file_);
    pid_ =
        start_program({STOKER_TEST_PYTHON, STOKER_FAULT_SERVER, root, port_file_, "--faults", faults, "--log", log_});
    for (int i = 0; i < 2000 && !std::filesystem::exists(port_file_); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream(port_file_) >> port_;
    if (port_ <= 0) throw std::runtime_error("the fault server did not start");
  }
  ~FaultServer() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  FaultServer(const FaultServer&) = delete;
  FaultServer& operator=(const FaultServer&) = delete;

  std::string url(const std::string& name) const { return fmt::format("http://127.0.0.1:{}/{}", port_, name); }
  // The requests it answered, one "GET NAME RANGE" line each.
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string port_file_, log_;
  int pid_ = -1;
  int port_ = 0;
};

// Three shards of small_schema, 40, 25 and 35 samples, in `dir`; 1 KiB-ish chunks so that a reset
// after a few bytes falls mid-body.
inline void write_shards(const TempDir& tmp, const std::string& dir) {
  std::filesystem::create_directories(tmp.path(dir));
  const std::uint64_t sizes[] = {40, 25, 35};
  for (int k = 0; k < 3; ++k) write_hdf5(tmp.path(fmt::format("{}/train-{}.h5", dir, k)), small_schema(sizes[k]), {});
}

inline Options remote_options(const TempDir& tmp, const FaultServer& server, std::size_t workers = 2) {
  Options o;
  o.source = server.url("train-{0..2}.h5");
  o.cache_dir = tmp.path("cache");
  o.batch_size = 9;
  o.num_workers = workers;
  o.shuffle = true;
  o.seed = 5;
  o.fetch_timeout = std::chrono::seconds(20);
  return o;
}

// Every batch's indices and bytes, in order.
inline std::vector<std::vector<std::byte>> epoch_bytes(Loader& loader) {
  std::vector<std::vector<std::byte>> out;
  for (Batch& b : loader.epoch(0)) {
    std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(b.indices().data()),
                                 reinterpret_cast<const std::byte*>(b.indices().data() + b.size()));
    for (const FieldView& f : b.fields()) bytes.insert(bytes.end(), f.data, f.data + f.bytes);
    out.push_back(std::move(bytes));
  }
  return out;
}

inline std::vector<std::vector<std::byte>> local_epoch(const TempDir& tmp) {
  Options o;
  o.source = tmp.path("served/train-*.h5");
  o.batch_size = 9;
  o.shuffle = true;
  o.seed = 5;
  Loader local(o);
  return epoch_bytes(local);
}

// 3 MiB and a bit of random bytes in `dir`/big.bin: more than the 1 MiB a fetch writes at once.
inline std::string write_big_object(const TempDir& tmp, const std::string& dir) {
  std::filesystem::create_directories(tmp.path(dir));
  std::string bytes((3u << 20) + 12345, '\0');
  std::mt19937_64 rng(7);
  for (char& c : bytes) c = static_cast<char>(rng());
  std::ofstream(tmp.path(dir + "/big.bin"), std::ios::binary) << bytes;
  return bytes;
}

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Retries 10 ms apart, and a failing test within 20 s.
inline remote::FetchPolicy quick_policy() {
  remote::FetchPolicy policy;
  policy.timeout = std::chrono::seconds(20);
  policy.first_backoff = std::chrono::milliseconds(10);
  return policy;
}

}  // namespace stoker::test
