#include "tools/common/demo_data.h"

#include <filesystem>
#include <functional>
#include <memory>

#include "formats/hdf5/hdf5_writer.h"
#include "tools/common/atomic_output.h"
#include "tools/common/output_check.h"
#include "tools/common/progress.h"
#include "tools/common/synthetic_data.h"

namespace stoker::tools {
namespace {

// The tools' progress (tools/common/progress.h) as the writers' callback.
std::function<void(std::uint64_t)> progress_for(const std::string& what, std::uint64_t total,
                                                std::uint64_t bytes_per_sample) {
  auto progress = std::make_shared<Progress>(what, total, bytes_per_sample, false);
  return [progress, total](std::uint64_t done) {
    progress->update(done);
    if (done == total) progress->finish();
  };
}

// Writes one dataset into PATH.partial, then moves it over PATH: a run stopped half-way leaves no
// half dataset under PATH (which a later run would take as made), and one already there is replaced
// whole, not appended to (the LMDB writer resumes a database it finds). Only a dataset of the same
// format is replaced, only a stopped run's PATH.partial removed (tools/common/output_check.h); a write
// that fails (a full disk) removes its PATH.partial.
void write_whole(const std::string& path, bool hdf5, const std::function<void(const std::string&)>& write) {
  const OutputKind kind{"loader-bench", !hdf5, hdf5, ""};
  const std::string partial = path + ".partial";
  check_output(path, kind, true);
  if (check_partial(partial, kind)) std::filesystem::remove_all(partial);  // a stopped run's
  try {
    write(partial);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove_all(partial, ignored);
    throw;
  }
  check_output(path, kind, true);
  move_into_place(partial, path);
}

}  // namespace

void write_bench_data(const std::string& dir, bool quiet) {
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
    auto schema = image_schema(s.n, s.side);
    auto p = [&](const std::string& suffix) { return (fs::path(dir) / (std::string(s.name) + suffix)).string(); };
    auto prog = [&](const std::string& f) {
      return quiet ? std::function<void(std::uint64_t)>{} : progress_for(f, s.n, schema.bytes_per_sample());
    };
    if (!fs::exists(p(".h5"))) {
      write_whole(p(".h5"), true, [&](const std::string& to) {
        write_synthetic_hdf5(to, schema, {Layout::chunked, s.chunk, 0}, prog(p(".h5")));
      });
    }
    if (std::string(s.name) == "small" && !fs::exists(p("-gzip.h5"))) {
      write_whole(p("-gzip.h5"), true, [&](const std::string& to) {
        write_synthetic_hdf5(to, schema, {Layout::chunked, s.chunk, 4}, prog(p("-gzip.h5")));
      });
    }
    if (!fs::exists(p(".lmdb"))) {
      write_whole(p(".lmdb"), false,
                  [&](const std::string& to) { write_synthetic_lmdb(to, schema, prog(p(".lmdb"))); });
    }
  }
}

void write_demo(const std::string& dir, std::uint64_t samples) {
  auto schema = image_schema(samples, 32);
  write_whole(dir + "/demo.h5", true, [&](const std::string& to) {
    write_synthetic_hdf5(to, schema, {stoker::formats::Hdf5WriteOptions::Layout::chunked, 256, 0});
  });
  write_whole(dir + "/demo.lmdb", false, [&](const std::string& to) { write_synthetic_lmdb(to, schema); });
}

}  // namespace stoker::tools
