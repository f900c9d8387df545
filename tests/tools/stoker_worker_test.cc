// stoker-worker: the fork server of programs that do not call stoker::init() first
// (stoker::set_worker_executable, stoker/init.h).
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <string>

#include "stoker/digest.h"
#include "stoker/init.h"
#include "stoker/loader.h"
#include "tests/support/run_process.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;
const std::string kWorker = STOKER_WORKER;

// Sets the worker executable for one test and clears it after, whatever happens.
struct WorkerExecutable {
  explicit WorkerExecutable(const std::string& path) { set_worker_executable(path); }
  ~WorkerExecutable() { set_worker_executable(""); }
};

std::string exe_of(int pid) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

TEST(StokerWorker, ServesTheWorkersOfAProgramNamingIt) {
  TempDir tmp;
  const Schema schema = small_schema(300);
  write_hdf5(tmp.path("d.h5"), schema, {formats::Hdf5WriteOptions::Layout::chunked, 16, 0});
  ContentDigest want;
  for (std::uint64_t i = 0; i < schema.num_samples; ++i) want.add(i, expected_sample(schema, i));

  WorkerExecutable exe(kWorker);
  EXPECT_EQ(worker_executable(), kWorker);
  EXPECT_TRUE(clean_workers());
  Options o;
  o.source = tmp.path("d.h5");
  o.batch_size = 16;
  o.num_workers = 2;
  o.shuffle = true;
  Loader loader(o);
  for (int pid : loader.worker_pids()) EXPECT_EQ(exe_of(pid), kWorker) << "worker pid " << pid;
  ContentDigest got;
  for (Batch& b : loader.epoch(0)) got.add(b);
  EXPECT_EQ(got.value(), want.value());
}

TEST(StokerWorker, AProgramThatDoesNotCallInitIsNamedInTheError) {
  TempDir tmp;
  write_hdf5(tmp.path("d.h5"), small_schema(50), {});
  WorkerExecutable exe("/bin/true");
  Options o;
  o.source = tmp.path("d.h5");
  o.num_workers = 1;
  const Caught c = caught([&] { Loader loader(o); });
  EXPECT_NE(c.message, "no error");
  EXPECT_THAT(c.message, HasSubstr("the worker executable /bin/true, whose main() must call stoker::init"));
}

TEST(StokerWorker, APathThatIsNoExecutableIsRefusedAtOnce) {
  TempDir tmp;
  expect_error(ErrorCode::invalid_option, [&] { set_worker_executable(tmp.path("missing")); },
               {"the worker executable", "missing", "No such file"});
  expect_error(ErrorCode::invalid_option, [&] { set_worker_executable(tmp.path("")); }, {"is not an executable file"});
  EXPECT_EQ(worker_executable(), "");
}

TEST(StokerWorker, StartedByHandItSaysWhatItIsFor) {
  const RunResult r = run_program({kWorker});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("the fork server of stoker's Loaders"));
}

}  // namespace
}  // namespace stoker::test
