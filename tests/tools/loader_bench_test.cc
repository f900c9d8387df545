#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/run_process.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
const std::string kBench = STOKER_LOADER_BENCH;

std::vector<nlohmann::json> bench_json(std::vector<std::string> args) {
  args.insert(args.begin(), kBench);
  args.push_back("--json");
  RunResult r = run_program(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<nlohmann::json> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class LoaderBench : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = small_schema(1000);
    write_hdf5(tmp_.path("d.h5"), schema_, {formats::Hdf5WriteOptions::Layout::chunked, 64, 0});
    write_lmdb(tmp_.path("d.lmdb"), schema_);
  }
  TempDir tmp_;
  Schema schema_;
};

TEST_F(LoaderBench, ContentDigestIsTheSameForFormatsWorkersAndShuffle) {
  std::set<std::string> content;
  for (const char* file : {"d.h5", "d.lmdb"}) {
    for (int workers : {0, 1, 2, 3}) {
      for (bool shuffle : {false, true}) {
        std::vector<std::string> args{"--data",   tmp_.path(file), "--workers", std::to_string(workers),
                                      "--digest", "--batch-size",  "33",        "--epochs",
                                      "1"};
        if (shuffle) args.push_back("--shuffle");
        auto epochs = bench_json(args);
        ASSERT_EQ(epochs.size(), 1u);
        EXPECT_EQ(epochs[0]["samples"], 1000);
        EXPECT_EQ(epochs[0]["batches"], 31);
        content.insert(epochs[0]["content_digest"].get<std::string>());
      }
    }
  }
  EXPECT_EQ(content.size(), 1u);
}

TEST_F(LoaderBench, OrderDigestDependsOnTheSeedNotTheWorkers) {
  std::set<std::string> seed1, seed2;
  for (int workers : {0, 1, 2, 3}) {
    for (int seed : {1, 2}) {
      auto epochs = bench_json({"--data", tmp_.path("d.lmdb"), "--workers", std::to_string(workers), "--shuffle",
                                "--seed", std::to_string(seed), "--digest", "--epochs", "2"});
      ASSERT_EQ(epochs.size(), 2u);
      EXPECT_NE(epochs[0]["order_digest"], epochs[1]["order_digest"]) << "epochs differ in order";
      (seed == 1 ? seed1 : seed2).insert(epochs[0]["order_digest"].get<std::string>());
    }
  }
  EXPECT_EQ(seed1.size(), 1u);
  EXPECT_EQ(seed2.size(), 1u);
  EXPECT_NE(*seed1.begin(), *seed2.begin());
}

// With a staged device the digest is taken from the device's copy, once it has landed: the same
// digests as on the CPU.
TEST_F(LoaderBench, DigestsOfAStagedDeviceAreThoseOfTheCpu) {
  auto cpu = bench_json({"--data", tmp_.path("d.lmdb"), "--shuffle", "--digest", "--epochs", "1"});
  auto staged = bench_json({"--data", tmp_.path("d.lmdb"), "--shuffle", "--digest", "--epochs", "1", "--device",
                            "emulated", "--staging", "registered"});
  ASSERT_EQ(cpu.size(), 1u);
  ASSERT_EQ(staged.size(), 1u);
  EXPECT_EQ(staged[0]["content_digest"], cpu[0]["content_digest"]);
  EXPECT_EQ(staged[0]["order_digest"], cpu[0]["order_digest"]);
}

TEST_F(LoaderBench, ReportsEveryKeyPerEpoch) {
  auto epochs = bench_json({"--data", tmp_.path("d.h5"), "--epochs", "3", "--step-ms", "1", "--batch-size", "100"});
  ASSERT_EQ(epochs.size(), 3u);
  for (const char* key : {"samples", "batches", "seconds", "samples_per_s", "mib_per_s", "ttfb_ms", "wait_p50_ms",
                          "wait_p99_ms", "stall_pct", "workers", "prefetch", "shm_bytes"}) {
    EXPECT_TRUE(epochs[0].contains(key)) << key;
  }
  EXPECT_EQ(epochs[2]["epoch"], 2);
  EXPECT_EQ(epochs[0]["workers"], 2);
  // The delivered fields, as loaded: name, kind, dtype, shape.
  ASSERT_EQ(epochs[0]["fields"].size(), 3u);
  EXPECT_EQ(epochs[0]["fields"][0]["name"], "image");
  EXPECT_EQ(epochs[0]["fields"][0]["kind"], "fixed");
  EXPECT_EQ(epochs[0]["fields"][0]["dtype"], "u8");
  EXPECT_EQ(epochs[0]["fields"][0]["shape"], nlohmann::json::array({3, 4, 5}));
  EXPECT_EQ(epochs[0]["fields"][1]["name"], "label");
  EXPECT_EQ(epochs[0]["fields"][1]["dtype"], "i64");
  EXPECT_EQ(epochs[0]["fields"][1]["shape"], nlohmann::json::array());
  EXPECT_EQ(epochs[0]["fields"][2]["shape"], nlohmann::json::array({2}));
  EXPECT_GT(epochs[0]["shm_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_GE(epochs[0]["stall_pct"].get<double>(), 0.0);
  EXPECT_LE(epochs[0]["stall_pct"].get<double>(), 100.0);
}

TEST_F(LoaderBench, UsageErrorsExit2WithPlainMessages) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--frobnicate"}, "The following argument was not expected: --frobnicate"},
      {{"--batch-size", "0"}, "--batch-size: must be at least 1, not 0"},
      {{"--batch-size", "1e3"}, "--batch-size: must be a whole number at least 1, not '1e3'"},
      {{"--workers", "-1"}, "--workers: must be a whole number from 0 to 1024, or auto, not '-1'"},
      {{"--workers", "2000"}, "--workers: must be a whole number from 0 to 1024, or auto, not '2000'"},
      {{"--workers", "abc"}, "--workers: must be a whole number from 0 to 1024, or auto, not 'abc'"},
      {{"--prefetch", "0"}, "--prefetch: must be a whole number from 1 to 1024, or auto, not '0'"},
      {{"--batch-size", "auto"}, "--batch-size: must be a whole number at least 1, not 'auto'"},
      {{"--epochs", "0"}, "--epochs: must be from 1 to"},
      {{"--step-ms", "-1"}, "--step-ms: must be at least 0, not -1"},
      {{"--device", "tpu"}, "--device: must be cpu, cuda, cuda:N or emulated, not 'tpu'"},
      {{"--format", "xx"}, "--format"},
      {{"--order", "shuffled"}, "--order: shuffled not in {sequential,random,quasi-random}"},
      {{"--order", "random", "--shuffle"}, "--shuffle excludes --order"},
      {{"--shm-budget", "12q"}, "--shm-budget"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv{kBench};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    RunResult r = run_program(argv);
    EXPECT_EQ(r.exit_code, 2) << c.args[0] << " " << r.err;
    EXPECT_THAT(r.err, HasSubstr("loader-bench: " + c.message)) << c.args[0];
    EXPECT_THAT(r.err, Not(HasSubstr("179769313486"))) << "CLI11's raw range text leaked";
  }
  RunResult help = run_program({kBench, "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--step-ms"));
}

TEST_F(LoaderBench, UnreadableDataExits1NamingIt) {
  RunResult missing = run_program({kBench, "--data", tmp_.path("nope.h5")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("loader-bench: " + tmp_.path("nope.h5") + ": No such file"));
  RunResult field = run_program({kBench, "--data", tmp_.path("d.lmdb"), "--fields", "image,nope"});
  EXPECT_EQ(field.exit_code, 1);
  EXPECT_THAT(field.err, HasSubstr("unknown field 'nope'"));
}

TEST_F(LoaderBench, ACudaDeviceRunsOrIsRefusedNamingWhatIsMissing) {
  // Either outcome is right, depending on the machine; a crash or a silent CPU run is not.
  RunResult cuda = run_program({kBench, "--data", tmp_.path("d.lmdb"), "--device", "cuda", "--epochs", "1", "--json"});
  if (cuda.exit_code == 0) {
    EXPECT_THAT(cuda.out, HasSubstr("\"device\":\"cuda\""));
    EXPECT_THAT(cuda.out, HasSubstr("h2d_gib_per_s"));
  } else {
    EXPECT_EQ(cuda.exit_code, 1) << cuda.err;
    EXPECT_THAT(cuda.err, HasSubstr("loader-bench: device cuda"));
    EXPECT_THAT(cuda.err, HasSubstr("use --device cpu on this machine")) << "in the tool's own words";
  }
}

// The library's advice names the tool's flags, not the C++ API's options.
TEST_F(LoaderBench, TheLibrarysAdviceNamesTheToolsFlags) {
  RunResult r = run_program({kBench, "--data", tmp_.path("d.lmdb"), "--workers", "2", "--batch-size", "100",
                             "--shm-budget", "4k", "--epochs", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("Raise the shm budget option (--shm-budget) to "));
  EXPECT_THAT(r.err, Not(HasSubstr("Options::")));
}

TEST_F(LoaderBench, TheFirstLineNamesTheFieldsAndAnEmptyStepIsExplained) {
  RunResult r = run_program({kBench, "--data", tmp_.path("d.h5"), "--epochs", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out,
              HasSubstr(tmp_.path("d.h5") + ": 1000 samples, fields image: u8[3,4,5], label: i64[], weight: f32[2]"));
  EXPECT_THAT(r.out, HasSubstr("no --step-ms: the training step is empty"));
  RunResult stepped = run_program({kBench, "--data", tmp_.path("d.h5"), "--epochs", "1", "--step-ms", "0.01"});
  ASSERT_EQ(stepped.exit_code, 0) << stepped.err;
  EXPECT_THAT(stepped.out, Not(HasSubstr("no --step-ms")));
}

// The whole job suspended (Ctrl-Z, scontrol suspend, docker pause: SIGSTOP to its process group)
// and resumed, four times, each time for longer than the timeout: no worker is taken for stuck, and
// the run ends as an undisturbed one does.
TEST_F(LoaderBench, AJobSuspendedFourTimesPastTheTimeoutLosesNoWorker) {
  const std::vector<std::string> args{kBench,
                                      "--data",
                                      tmp_.path("d.lmdb"),
                                      "--workers",
                                      "2",
                                      "--epochs",
                                      "4",
                                      "--batch-size",
                                      "10",
                                      "--step-ms",
                                      "10",
                                      "--timeout",
                                      "1",
                                      "--max-respawns",
                                      "0",
                                      "--digest",
                                      "--json"};
  const RunResult undisturbed = run_program(args);
  ASSERT_EQ(undisturbed.exit_code, 0) << undisturbed.err;
  int suspensions = 0;
  const RunResult r = run_program_in_group(args, [&](int pid) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int i = 0; i < 4; ++i) {
      if (::kill(-pid, SIGSTOP) != 0) return;  // it ended
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      ::kill(-pid, SIGCONT);
      ++suspensions;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(suspensions, 4) << "the run ended before it was suspended four times";
  EXPECT_THAT(r.err, Not(HasSubstr("no progress")));
  auto digests = [](const std::string& out) {
    std::vector<std::string> d;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      d.push_back(nlohmann::json::parse(line)["content_digest"].get<std::string>());
    }
    return d;
  };
  EXPECT_EQ(digests(r.out), digests(undisturbed.out));
  EXPECT_EQ(digests(r.out).size(), 4u);
}

TEST_F(LoaderBench, AWorkerKilledMidEpochChangesNoDigestAndIsOneWarning) {
  const std::vector<std::string> args{kBench,         "--data", tmp_.path("d.lmdb"), "--workers", "2",
                                      "--batch-size", "16",     "--shuffle",         "--epochs",  "2",
                                      "--step-ms",    "10",     "--digest",          "--json"};
  RunResult undisturbed = run_program(args);
  ASSERT_EQ(undisturbed.exit_code, 0) << undisturbed.err;
  RunResult disturbed;
  std::thread run([&] { disturbed = run_program(args); });
  // loader-bench is this process's child, its fork server a grandchild, the workers below that.
  int victim = 0;
  for (int i = 0; i < 400 && victim == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (int d : descendants()) {
      const int parent = parent_of(d), grandparent = parent ? parent_of(parent) : 0;
      if (grandparent && parent_of(grandparent) == ::getpid()) victim = d;
    }
  }
  ASSERT_NE(victim, 0) << "no worker found";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // well into the first epoch
  ASSERT_EQ(0, ::kill(victim, SIGKILL));
  run.join();
  ASSERT_EQ(disturbed.exit_code, 0) << disturbed.err;
  auto digests = [](const std::string& out) {
    std::vector<std::string> d;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) {
        ADD_FAILURE() << "not a JSON line: " << line;
        continue;
      }
      d.push_back(j["content_digest"].get<std::string>() + " " + j["order_digest"].get<std::string>());
    }
    return d;
  };
  EXPECT_EQ(digests(disturbed.out), digests(undisturbed.out));
  ASSERT_EQ(digests(disturbed.out).size(), 2u);
  EXPECT_THAT(disturbed.err, HasSubstr("(pid " + std::to_string(victim) + ") was killed by signal SIGKILL"));
  EXPECT_EQ(std::count(disturbed.err.begin(), disturbed.err.end(), '\n'), 1) << disturbed.err;
  const std::string last = disturbed.out.substr(disturbed.out.rfind('\n', disturbed.out.size() - 2) + 1);
  EXPECT_EQ(nlohmann::json::parse(last, nullptr, false).value("respawns", -1), 1);
}

TEST(LoaderBenchDemo, RunsOutOfTheBoxOnGeneratedData) {
  RunResult r = run_program({kBench, "--demo-samples", "3000", "--epochs", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("generated a demo dataset of 3000 samples"));
  EXPECT_THAT(r.out, HasSubstr("demo.h5"));
  EXPECT_THAT(r.out, HasSubstr("demo.lmdb"));
  EXPECT_THAT(r.out, HasSubstr("samples/s"));
}

TEST(LoaderBenchDemo, MakingTheDemoAgainReplacesItWhole) {
  TempDir tmp;
  const std::string dir = tmp.path("demo");
  for (const char* samples : {"700", "500"}) {
    RunResult made = run_program({kBench, "--make-demo", dir, "--demo-samples", samples});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    for (const char* file : {"demo.h5", "demo.lmdb"}) {
      auto epochs = bench_json({"--data", dir + "/" + file, "--epochs", "1"});
      ASSERT_EQ(epochs.size(), 1u) << file;
      EXPECT_EQ(epochs[0]["samples"], std::stoi(samples)) << file;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/demo.lmdb.partial"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/demo.h5.partial"));
}

}  // namespace
}  // namespace stoker::test
