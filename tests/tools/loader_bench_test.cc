#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include "tests/support/run_process.h"
#include "tests/support/test_data.h"
#include "tests/support/test_images.h"

namespace stoker::test {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
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
                            "emulated", "--staging", "registered_shm"});
  ASSERT_EQ(cpu.size(), 1u);
  ASSERT_EQ(staged.size(), 1u);
  EXPECT_EQ(staged[0]["content_digest"], cpu[0]["content_digest"]);
  EXPECT_EQ(staged[0]["order_digest"], cpu[0]["order_digest"]);
}

// --mix: the same order for any number of workers, each epoch the mix's next draws, a state that
// records each source's draws and resumes the rest of its epoch; a malformed entry is a usage error.
TEST_F(LoaderBench, AMixIsOneOrderForAnyWorkersAndResumesFromItsState) {
  const std::vector<std::string> mix{"--mix",
                                     "3:" + tmp_.path("d.h5"),
                                     "--mix",
                                     "1:" + tmp_.path("d.lmdb"),
                                     "--samples-per-epoch",
                                     "400",
                                     "--shuffle",
                                     "--digest"};
  std::set<std::string> orders;
  for (const char* workers : {"0", "2"}) {
    std::vector<std::string> args = mix;
    args.insert(args.end(), {"--workers", workers, "--epochs", "2", "--batch-size", "50"});
    const auto epochs = bench_json(args);
    ASSERT_EQ(epochs.size(), 2u);
    EXPECT_EQ(epochs[0]["samples"], 400);
    EXPECT_NE(epochs[0]["order_digest"], epochs[1]["order_digest"]);
    orders.insert(epochs[0]["order_digest"].get<std::string>() + epochs[1]["order_digest"].get<std::string>());
  }
  EXPECT_EQ(orders.size(), 1u);

  std::vector<std::string> stop = mix;
  stop.insert(stop.end(), {"--epochs", "1", "--batch-size", "50", "--stop-after-batches", "3", "--state-out",
                           tmp_.path("state.json")});
  ASSERT_EQ(bench_json(stop).size(), 1u);
  std::ifstream in(tmp_.path("state.json"));
  const nlohmann::json state = nlohmann::json::parse(in);
  EXPECT_EQ(state["consumed"], 150);
  EXPECT_EQ(state["drawn"], nlohmann::json::array({113, 37}));
  std::vector<std::string> resume = mix;
  resume.insert(resume.end(), {"--epochs", "1", "--resume", tmp_.path("state.json"), "--batch-size", "30"});
  const auto rest = bench_json(resume);
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0]["samples"], 250);

  const RunResult bad = run_program({kBench, "--mix", "three:" + tmp_.path("d.h5")});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("is not WEIGHT:PATH (a number, ':', a dataset), e.g. 3:web/"));
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
      {{"--order", "shuffled"}, "--order: 'shuffled' is not one of sequential, random, quasi_random"},
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

// A dataset's names are the file's: printed escaped (stoker::printable), so that a name cannot
// clear the terminal, colour it or start a line of its own, in the table, the JSON and errors.
TEST_F(LoaderBench, NamesFromTheFileArePrintedEscapedNeverActingOnTheTerminal) {
  const std::string evil = "evil\x1b[2J\nforged: ok", blob = "blob\r\x1b[31m";
  const std::string path = tmp_.path("names.h5");
  {
    H5Builder f(path);
    std::vector<std::int64_t> values(8);
    std::iota(values.begin(), values.end(), 0);
    f.array(evil, H5T_NATIVE_INT64, {8}, values.data());
    f.vlen(blob, std::vector<std::vector<std::byte>>(8, std::vector<std::byte>(3, std::byte{7})));
  }
  const auto raw = [](const RunResult& r) {
    const std::string all = r.out + r.err;
    return all.find_first_of("\x1b\r") != std::string::npos;
  };
  RunResult table = run_program({kBench, "--data", path, "--epochs", "1", "--batch-size", "4"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.out.substr(0, table.out.find('\n')),
            path +
                ": 8 samples, fields blob\\r\\x1b[31m: bytes, evil\\x1b[2J\\nforged: ok: i64[] ('blob\\r\\x1b[31m': "
                "variable-length u8 dataset 'blob\\r\\x1b[31m')");
  EXPECT_THAT(table.out, Not(HasSubstr("\nforged")));
  EXPECT_FALSE(raw(table));

  RunResult json = run_program({kBench, "--data", path, "--epochs", "1", "--batch-size", "4", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_FALSE(raw(json));
  EXPECT_EQ(std::count(json.out.begin(), json.out.end(), '\n'), 1);
  const auto epoch = nlohmann::json::parse(json.out);  // the names themselves, \u-escaped in the text
  EXPECT_EQ(epoch["fields"][0]["name"], blob);
  EXPECT_EQ(epoch["fields"][1]["name"], evil);

  RunResult unknown = run_program({kBench, "--data", path, "--fields", "nope", "--epochs", "1"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("unknown field 'nope' (datasets in the root group: blob\\r\\x1b[31m, "
                                     "evil\\x1b[2J\\nforged: ok; groups: none)"));
  EXPECT_FALSE(raw(unknown));
}

// --on-decode-error: a sample that does not decode stops the run naming it (fail, the default), or
// is delivered as zeros and counted in each epoch's report, with one warning naming it (skip).
TEST_F(LoaderBench, OnDecodeErrorSkipCountsTheSampleAndWarnsOnce) {
  const std::string path = tmp_.path("images.h5");
  {
    std::vector<std::vector<std::byte>> images;
    for (int i = 0; i < 8; ++i) {
      images.push_back(i == 5 ? std::vector<std::byte>(40, std::byte{'x'})
                              : encode_png(std::vector<std::uint8_t>(4 * 4 * 3, static_cast<std::uint8_t>(i)), 4, 4));
    }
    std::vector<std::int64_t> labels(8);
    std::iota(labels.begin(), labels.end(), 0);
    H5Builder f(path);
    f.vlen("img", images);
    f.array("label", H5T_NATIVE_INT64, {8}, labels.data());
  }
  const std::vector<std::string> run{
      kBench, "--data", path, "--pipeline", "img=decode(4,4)", "--batch-size", "3", "--workers", "2", "--epochs", "2"};
  RunResult failed = run_program(run);
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_THAT(failed.err, HasSubstr(path + ": field 'img', sample 5: not a JPEG or PNG image (40 bytes"));

  std::vector<std::string> skip = run;
  skip.insert(skip.end(), {"--on-decode-error", "skip", "--json"});
  RunResult json = run_program(skip);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  std::istringstream lines(json.out);
  std::vector<nlohmann::json> epochs;
  for (std::string line; std::getline(lines, line);) epochs.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(epochs.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(epochs[e]["samples"], 8);
    EXPECT_EQ(epochs[e]["skipped_samples"], e + 1) << "counted at each delivery";
    EXPECT_EQ(epochs[e]["skipped_indices"], nlohmann::json::array({5}));
  }
  EXPECT_EQ(std::count(json.err.begin(), json.err.end(), '\n'), 1) << json.err;
  EXPECT_THAT(json.err, HasSubstr("stoker: warning: " + path + ": field 'img', sample 5: not a JPEG or PNG image"));
  EXPECT_THAT(json.err, HasSubstr("; skipped (--on-decode-error skip): the field holds zeros (batch 1 of epoch 0, "
                                  "position 2)"));

  skip.pop_back();
  RunResult table = run_program(skip);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("  samples skipped so far (--on-decode-error skip): 1, indices 5\n"));
  EXPECT_THAT(table.out, HasSubstr("  samples skipped so far (--on-decode-error skip): 2, indices 5\n"));

  RunResult bad = run_program({kBench, "--data", path, "--on-decode-error", "ignore"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--on-decode-error"));
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

// What the demo replaces is a demo dataset: never a directory of someone's files that has the name.
TEST(LoaderBenchDemo, MakingTheDemoReplacesOnlyADatasetOfItsFormat) {
  TempDir tmp;
  const std::string dir = tmp.path("demo");
  std::filesystem::create_directories(dir + "/demo.h5");
  std::ofstream(dir + "/demo.h5/mine.txt") << "mine";
  RunResult r = run_program({kBench, "--make-demo", dir, "--demo-samples", "300"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "loader-bench: " + dir +
                       "/demo.h5: is a directory holding 1 file (mine.txt is a file of 4 B, not an HDF5 file): not "
                       "replaced; name a new path\n");
  std::ifstream mine(dir + "/demo.h5/mine.txt");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(mine), {}), "mine");
}

// Writing the demo past a file-size limit (EFBIG, as a full disk's ENOSPC, which any user can set):
// exit 1 with the error, never a crash in HDF5, and no half-written file left.
TEST(LoaderBenchDemo, MakingTheDemoPastAFileSizeLimitIsExit1AndLeavesNoPartialFile) {
  TempDir tmp;
  const std::string dir = tmp.path("demo");
  std::filesystem::create_directories(dir);
  RunResult r = run_program_with_file_limit({kBench, "--make-demo", dir, "--demo-samples", "3000"}, 256 << 10);
  EXPECT_EQ(r.signal, 0) << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("loader-bench: " + dir + "/demo.h5.partial: "));
  EXPECT_THAT(r.err, EndsWith(": File too large (EFBIG)\n"));
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

TEST(LoaderBenchDemo, MakingTheDemoOntoAFullDiskIsExit1AndLeavesNoPartialFile) {
  TempDir tmp;
  const std::string dir = tmp.path("small");
  const int rc = with_small_tmpfs(dir, 256 << 10, [&] {
    RunResult r = run_program({kBench, "--make-demo", dir, "--demo-samples", "3000"});
    const bool ok = r.signal == 0 && r.exit_code == 1 &&
                    r.err.starts_with("loader-bench: " + dir + "/demo.h5.partial: ") &&
                    r.err.ends_with(": No space left on device (ENOSPC)\n") && std::filesystem::is_empty(dir);
    if (!ok) std::fprintf(stderr, "exit %d, signal %d: %s\n", r.exit_code, r.signal, r.err.c_str());
    return ok ? 0 : 1;
  });
  if (rc == 77) GTEST_SKIP() << "this system lets the test mount no tmpfs (neither root nor user namespaces)";
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace stoker::test
