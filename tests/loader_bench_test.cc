#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tests/run_process.h"
#include "tests/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;
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
        std::vector<std::string> args{"--data", tmp_.path(file), "--workers", std::to_string(workers), "--digest",
                                      "--batch-size", "33", "--epochs", "1"};
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

TEST_F(LoaderBench, ReportsEveryKeyPerEpoch) {
  auto epochs = bench_json({"--data", tmp_.path("d.h5"), "--epochs", "3", "--step-ms", "1", "--batch-size", "100"});
  ASSERT_EQ(epochs.size(), 3u);
  for (const char* key : {"samples", "batches", "seconds", "samples_per_s", "mb_per_s", "ttfb_ms", "wait_p50_ms",
                          "wait_p99_ms", "stall_pct", "workers", "prefetch", "shm_bytes"}) {
    EXPECT_TRUE(epochs[0].contains(key)) << key;
  }
  EXPECT_EQ(epochs[2]["epoch"], 2);
  EXPECT_EQ(epochs[0]["workers"], 2);
  EXPECT_GT(epochs[0]["shm_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_GE(epochs[0]["stall_pct"].get<double>(), 0.0);
  EXPECT_LE(epochs[0]["stall_pct"].get<double>(), 100.0);
}

TEST_F(LoaderBench, BadFlagsAndUnreadableDataFail) {
  RunResult unknown = run_program({kBench, "--frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("--frobnicate"));
  RunResult bad_value = run_program({kBench, "--batch-size", "0"});
  EXPECT_EQ(bad_value.exit_code, 2);
  RunResult missing = run_program({kBench, "--data", tmp_.path("nope.h5")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("loader-bench: " + tmp_.path("nope.h5") + ": No such file"));
  RunResult field = run_program({kBench, "--data", tmp_.path("d.lmdb"), "--fields", "image,nope"});
  EXPECT_EQ(field.exit_code, 1);
  EXPECT_THAT(field.err, HasSubstr("unknown field 'nope'"));
  RunResult cuda = run_program({kBench, "--data", tmp_.path("d.lmdb"), "--device", "cuda"});
  EXPECT_EQ(cuda.exit_code, 1);
}

TEST(LoaderBenchDemo, RunsOutOfTheBoxOnGeneratedData) {
  RunResult r = run_program({kBench, "--demo-samples", "3000", "--epochs", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("generated a demo dataset of 3000 samples"));
  EXPECT_THAT(r.out, HasSubstr("demo.h5"));
  EXPECT_THAT(r.out, HasSubstr("demo.lmdb"));
  EXPECT_THAT(r.out, HasSubstr("samples/s"));
}

}  // namespace
}  // namespace stoker::test
