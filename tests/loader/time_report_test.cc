// Where the time goes: the stage times a Loader reports and the verdict's rule
// (docs/observability.md), on numbers made up for each case and on real loaders that build each
// situation: a slow step, a slow operation, slow reads.
#include "loader/time_report.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/env.h"
#include "loader/loader_design.h"
#include "loader/trace_writer.h"
#include "stoker/init.h"
#include "stoker/loader.h"
#include "stoker/pipeline.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using detail::VerdictContext;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Stats of 100 batches: the loop waited `wait` s and stepped `step` s; `workers` workers were
// busy `busy` s of which `cpu` s on a CPU, in these stages.
Stats made_up(double wait, double step, std::size_t workers, double busy, double cpu, std::vector<StageTime> stages) {
  Stats s;
  s.batches = 100;
  s.wait_seconds = wait;
  s.step_seconds = step;
  s.workers = workers;
  s.worker_busy_seconds = busy;
  s.worker_cpu_seconds = cpu;
  s.stages = std::move(stages);
  return s;
}

const std::vector<StageTime> kDecodeBound{{"read", 1}, {"transform", 0}, {"write", 0}, {"jpeg: decode", 8}};

TEST(Verdict, NamesWhatLimitsThroughputAndWhatToChange) {
  const VerdictContext two_cpus{2, false, false};
  EXPECT_EQ(detail::verdict(made_up(0.5, 9.5, 2, 5, 5, kDecodeBound), two_cpus),
            "the training step limits throughput: it waits for data 5% of the time, and nothing in the loader would "
            "change that");
  EXPECT_EQ(detail::verdict(made_up(9, 1, 0, 0, 0, kDecodeBound), two_cpus),
            "loading runs in the training loop's thread (90% of the loop, 89% of it in 'jpeg: decode'): set "
            "num_workers (this process may use 2 CPUs)");
  EXPECT_EQ(detail::verdict(made_up(5, 5, 2, 4, 4, kDecodeBound), two_cpus),
            "the ring's depth: the loop waits 50% of the time while the workers are busy 20% of it: raise prefetch "
            "(prefetch_factor) so that they always have a batch to fill");
  EXPECT_EQ(detail::verdict(made_up(8, 2, 1, 10, 1, {{"read", 9}, {"jpeg: decode", 1}}), two_cpus),
            "storage reads: the loop waits 80% of the time; the workers spend 90% of theirs reading and are on a CPU "
            "10% of it: order='quasi_random' reads in long runs, more workers overlap more reads");
  EXPECT_EQ(detail::verdict(made_up(8, 2, 1, 10, 1, {{"read", 9}, {"jpeg: decode", 1}}), {2, true, false}),
            "storage reads: the loop waits 80% of the time; the workers spend 90% of theirs reading and are on a CPU "
            "10% of it: more workers overlap more reads");
  EXPECT_EQ(detail::verdict(made_up(8, 2, 1, 10, 10, kDecodeBound), two_cpus),
            "the workers' CPU: the loop waits 80% of the time, and the workers spend 89% of theirs in 'jpeg: decode': "
            "add workers (1 of 2 CPUs in use)");
  EXPECT_THAT(detail::verdict(made_up(8, 2, 2, 20, 20, kDecodeBound), two_cpus),
              StartsWith("the workers' CPU, a worker per CPU: the loop waits 80% of the time, and the workers spend "
                         "89% of theirs in 'jpeg: decode': make it cheaper (decode(H,W) decodes at a reduced scale"));
  EXPECT_EQ(detail::verdict(made_up(8, 2, 2, 20, 20, {{"read", 9}, {"write", 1}}), two_cpus),
            "the workers' CPU, a worker per CPU: the loop waits 80% of the time, and the workers spend 90% of theirs "
            "in 'read': make it cheaper (reading copies each sample's bytes and inflates compressed HDF5: fewer "
            "Options::fields, or a lighter compression, cost less)");
  Stats staged = made_up(8, 2, 2, 20, 20, kDecodeBound);
  staged.h2d_seconds = 6;
  EXPECT_THAT(detail::verdict(staged, {2, false, true}), StartsWith("the consumer's copies to the device"));
  Stats fetching = made_up(8, 2, 2, 20, 20, kDecodeBound);
  fetching.fetch_wait_seconds = 5;
  fetching.downloads = 40;
  fetching.evictions = 36;
  EXPECT_EQ(detail::verdict(fetching, two_cpus),
            "remote shards: the loop waits 80% of the time, mostly for shards still being fetched (40 fetched, 36 "
            "evicted to make room): a larger Options::cache_limit fetches fewer again, a larger "
            "Options::fetch_parallelism fetches "
            "faster");
  fetching.fetch_wait_seconds = 3;  // less than half the waits: what else limits it is said
  EXPECT_THAT(detail::verdict(fetching, two_cpus), StartsWith("the workers' CPU, a worker per CPU"));
  fetching.fetch_seconds = 1.25;  // and what the construction fetched, apart
  EXPECT_THAT(detail::verdict(fetching, {2, false, false, 8, 3 << 20}),
              ::testing::EndsWith("; before the first batch, 1.2 s went to fetching 8 remote shards (3.0 MiB) into "
                                  "the cache"));
  Stats early = made_up(8, 2, 2, 20, 20, kDecodeBound);
  early.batches = 3;
  EXPECT_EQ(detail::verdict(early, two_cpus), "too few batches to tell yet (3)");
}

// spin(ms) on an i64 field: passes it through after ms milliseconds of CPU time.
OpSpec same(const OpSpec& in, std::span<const double>) { return in; }
void spin(const SampleIn& in, SampleOut& out, std::span<const double> args, SampleRandom&) {
  std::memcpy(out.resize(in.dtype, in.shape), in.data.data(), in.data.size());
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(args[0]);
  while (std::chrono::steady_clock::now() < until) {
  }
}
STOKER_REGISTER_OP(spin, same, spin);

class TimeReport : public ::testing::Test {
 protected:
  void SetUp() override {
    write_hdf5(tmp_.path("d.h5"), small_schema(400), {formats::Hdf5WriteOptions::Layout::contiguous, 0, 0});
  }
  Options options(std::size_t workers) {
    Options o;
    o.source = tmp_.path("d.h5");
    o.batch_size = 10;
    o.num_workers = workers;
    return o;
  }
  // Two epochs, each batch followed by a step of `step`.
  static Stats run(Loader& l, std::chrono::milliseconds step = {}) {
    for (int e = 0; e < 2; ++e) {
      for (Batch& b : l.epoch(e)) {
        (void)b;
        if (step.count()) std::this_thread::sleep_for(step);
      }
    }
    return l.stats();
  }
  TempDir tmp_;
};

TEST_F(TimeReport, StagesAreNamedInOrderAndTimed) {
  for (const std::size_t workers : {0u, 2u}) {
    SCOPED_TRACE(workers);
    Options o = options(workers);
    o.pipeline = "image=flip(0.5),to_chw;label=spin(0.05)";
    Loader l(o);
    const Stats s = run(l, std::chrono::milliseconds(1));
    std::vector<std::string> names;
    for (const StageTime& t : s.stages) names.push_back(t.name);
    EXPECT_THAT(names,
                ElementsAre("read", "transform", "write", "image: flip(0.5)", "image: to_chw", "label: spin(0.05)"));
    EXPECT_GT(s.stages[0].seconds, 0) << "read";
    EXPECT_EQ(s.stages[1].seconds, 0) << "no transform";
    // 800 samples of at least 0.05 ms each, whichever processes ran them.
    EXPECT_GE(s.stages[5].seconds, 800 * 0.05e-3);
    EXPECT_GE(s.step_seconds, 80 * 1e-3) << "80 steps of at least 1 ms";
  }
  Options twice = options(0);
  twice.pipeline = "image=flip(0.5),flip(0.5)";
  Loader l(twice);
  std::vector<std::string> names;
  for (const StageTime& t : l.stats().stages) names.push_back(t.name);
  EXPECT_THAT(names, ElementsAre("read", "transform", "write", "image: flip(0.5)", "image: flip(0.5) #2"));
}

TEST_F(TimeReport, ASlowStepIsTheVerdict) {
  Loader l(options(2));
  EXPECT_THAT(run(l, std::chrono::milliseconds(10)).verdict, StartsWith("the training step limits throughput"));
}

TEST_F(TimeReport, ASlowOperationIsNamedAsWhereTheWorkersCpuGoes) {
  Options o = options(1);
  o.pipeline = "label=spin(1)";
  Loader l(o);
  const Stats s = run(l);
  EXPECT_THAT(s.verdict, StartsWith("the workers' CPU"));
  EXPECT_THAT(s.verdict, HasSubstr("in 'label: spin(1)'"));
}

// The tuner's first step comes after the first batch (its wait is the workers opening the dataset)
// and two intervals of 8: a worker that never idles while the loop only waits points to every core,
// which the tuner takes at once, and settles.
TEST_F(TimeReport, AutoWorkersTakeEveryCoreAfterTheFirstBatchAndTwoIntervalsOfEight) {
  const unsigned cores = std::min(16u, detail::usable_cpus());
  if (cores < 2) GTEST_SKIP() << "one core: the tuner has no worker to add";
  Options o = options(0);
  o.num_workers = kAuto;
  o.pipeline = "label=spin(1)";  // 10 ms a batch: intervals of 8 batches outlast their 5 ms
  Loader l(o);
  for (Batch& b : l.epoch(0)) (void)b;
  EXPECT_EQ(l.stats().auto_tuning, fmt::format("{} workers, prefetch 2 (auto: settled after 17 batches)", cores));
}

// A pread that sleeps: storage that keeps the workers waiting, not computing.
class SlowStorage : public detail::Env {
 public:
  ssize_t pread(int fd, void* buf, std::size_t n, off_t offset) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return Env::pread(fd, buf, n, offset);
  }
};

TEST_F(TimeReport, SlowReadsAreStorage) {
  if (clean_workers()) GTEST_SKIP() << "a slow Env in the workers: runs on the fork-only path";
  SlowStorage env;
  detail::Env::install(&env);
  Loader l(options(1));
  const Stats s = run(l);
  detail::Env::install(nullptr);
  EXPECT_THAT(s.verdict, StartsWith("storage reads")) << s.verdict;
}

}  // namespace
}  // namespace stoker::test

namespace stoker::test {
namespace {

// The trace file's events, read as Perfetto's UI and chrome://tracing read it: the closing "]" may
// be missing (a run killed midway), so the text is cut after its last whole event and closed.
nlohmann::json read_trace(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.find_last_of(']') == std::string::npos || text.find_last_of(']') < text.find_last_of('}')) {
    text.erase(text.find_last_of('}') + 1);
    text += "]";
  }
  return nlohmann::json::parse(text);
}

std::vector<nlohmann::json> events_of(const nlohmann::json& trace, const std::string& ph, int tid) {
  std::vector<nlohmann::json> out;
  for (const auto& e : trace) {
    if (e["ph"] == ph && e.value("tid", -1) == tid) out.push_back(e);
  }
  return out;
}

TEST_F(TimeReport, TheTraceHasATrackPerWorkerABatchSpanPerBatchItsStagesInsideAndTheLoopsWaits) {
  const std::string path = tmp_.path("run.json");
  Options o = options(2);
  o.pipeline = "label=spin(0.02)";
  o.trace = path;
  std::uint64_t batches = 0;
  {
    Loader l(o);
    for (int e = 0; e < 2; ++e) {
      for (Batch& b : l.epoch(e)) {
        (void)b;
        ++batches;
      }
    }
  }
  const nlohmann::json trace = read_trace(path);
  std::map<int, std::string> tracks;
  for (const auto& e : trace) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
  }
  EXPECT_EQ(tracks, (std::map<int, std::string>{{0, "consumer"}, {1, "worker 0"}, {2, "worker 1"}}));
  std::uint64_t batch_spans = 0;
  for (const int tid : {1, 2}) {
    const nlohmann::json* batch = nullptr;
    for (const auto& e : events_of(trace, "X", tid)) {
      const std::string name = e["name"];
      if (name.rfind("batch ", 0) == 0) {
        batch = &e;
        ++batch_spans;
        EXPECT_EQ(e["args"]["samples"], 10);
        continue;
      }
      ASSERT_NE(batch, nullptr) << "a stage span outside a batch: " << e;
      EXPECT_THAT(name, ::testing::AnyOf("read", "label: spin(0.02)", "write", "transform"));
      const double from = (*batch)["ts"], to = from + (*batch)["dur"].get<double>();
      EXPECT_GE(e["ts"].get<double>(), from) << e;
      EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), to + 0.01) << e << " inside " << *batch;
    }
  }
  EXPECT_EQ(batch_spans, batches) << "one batch span per batch delivered";
  std::uint64_t waits = 0, steps = 0;
  for (const auto& e : events_of(trace, "X", 0)) {
    const std::string name = e["name"];
    waits += name.rfind("wait: batch ", 0) == 0;
    steps += name == "step";
  }
  EXPECT_EQ(waits, batches);
  EXPECT_EQ(steps, batches) << "from each batch handed out to the next call";
  EXPECT_EQ(trace.back()["name"], "stoker_dropped_events");
  EXPECT_EQ(trace.back()["args"]["dropped"], 0);
}

// A staged device's three tracks: the staging thread's batches, the copies as the device ran them
// (each placed on the host's clock through a device event waited for once) and the gaps in which
// the compute stream waited for data. Data is made late (spin), so the stream waits.
void expect_device_tracks(Options o, const std::string& path) {
  o.pipeline = "label=spin(0.2)";
  o.trace = path;
  std::vector<std::uint64_t> delivered;
  {
    Loader l(o);
    for (Batch& b : l.epoch(0)) {
      b.ready_on(nullptr);  // the emulated device's null stream: the idle meter's step
      delivered.push_back(b.index());
    }
  }
  const nlohmann::json trace = read_trace(path);
  std::map<int, std::string> tracks;
  for (const auto& e : trace) {
    if (e["ph"] == "M" && e["name"] == "thread_name") tracks[e["tid"].get<int>()] = e["args"]["name"];
  }
  const int staging = static_cast<int>(detail::TraceWriter::device_track(detail::DeviceTrace::Track::staging));
  const int copies = static_cast<int>(detail::TraceWriter::device_track(detail::DeviceTrace::Track::copies));
  const int idle = static_cast<int>(detail::TraceWriter::device_track(detail::DeviceTrace::Track::idle));
  EXPECT_EQ(tracks[staging], "staging");
  EXPECT_EQ(tracks[copies], "device: copies");
  EXPECT_EQ(tracks[idle], "device: idle");
  const std::uint64_t batch_bytes = 10 * small_schema(1).bytes_per_sample();
  // Every batch delivered was staged and copied, once (copies are traced as they are found landed,
  // not in order); a batch staged ahead of the loop may be there too.
  std::map<int, std::map<std::uint64_t, nlohmann::json>> by_batch;
  for (const int track : {staging, copies}) {
    for (const auto& e : events_of(trace, "X", track)) {
      const auto batch = e["args"]["batch"].get<std::uint64_t>();
      EXPECT_TRUE(by_batch[track].emplace(batch, e).second) << "twice: " << e;
      EXPECT_EQ(e["args"]["bytes"].get<std::uint64_t>(), batch_bytes) << e;
      EXPECT_GE(e["dur"].get<double>(), 0) << e;
    }
  }
  for (const std::uint64_t batch : delivered) {
    ASSERT_TRUE(by_batch[staging].count(batch)) << "batch " << batch << " staged";
    ASSERT_TRUE(by_batch[copies].count(batch)) << "batch " << batch << " copied";
    // The copy ran after its staging began (the host queued it); 50 us for the timeline's error.
    EXPECT_GE(by_batch[copies][batch]["ts"].get<double>() + 50, by_batch[staging][batch]["ts"].get<double>())
        << by_batch[copies][batch];
  }
  const auto gaps = events_of(trace, "X", idle);
  EXPECT_FALSE(gaps.empty()) << "the stream waited for late data";
  for (const auto& e : gaps) {
    EXPECT_EQ(e["name"], "waits for data");
    EXPECT_GT(e["dur"].get<double>(), 0);
  }
}

TEST_F(TimeReport, AStagedDeviceHasItsStagingCopiesAndIdleGapsOnTracksOfTheirOwn) {
  Options o = options(2);
  o.device = Device::emulated();
  expect_device_tracks(o, tmp_.path("device.json"));
}

// The same on a GPU (tests/gpu/check.sh runs it there): the copy engine's and the compute stream's
// events placed on the host's clock by the CUDA driver's timings.
TEST(CudaDevice, TheTraceShowsTheStagingTheCopiesAndTheIdleGaps) {
  TempDir tmp;
  write_hdf5(tmp.path("d.h5"), small_schema(400), {formats::Hdf5WriteOptions::Layout::contiguous, 0, 0});
  Options o;
  o.source = tmp.path("d.h5");
  o.batch_size = 10;
  o.num_workers = 2;
  o.device = Device::cuda(0);
  try {
    Loader probe(o);
  } catch (const Error& e) {
    GTEST_SKIP() << "no GPU here: " << e.what();
  }
  expect_device_tracks(o, tmp.path("device.json"));
}

TEST_F(TimeReport, ARunKilledMidwayLeavesATraceThatStillLoads) {
  const std::string path = tmp_.path("killed.json");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      Options o = options(1);
      o.trace = path;
      Loader l(o);
      for (Batch& b : l.epoch(0)) (void)b;  // an epoch's end writes the trace out
      Epoch second = l.epoch(1);
      (void)second.next();
      ::kill(::getpid(), SIGKILL);
    } catch (...) {
    }
    ::_exit(1);  // never back into the test suite
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const nlohmann::json trace = read_trace(path);
  std::uint64_t batch_spans = 0;
  for (const auto& e : events_of(trace, "X", 1)) batch_spans += e["name"].get<std::string>().rfind("batch ", 0) == 0;
  EXPECT_GE(batch_spans, 40u) << "the first epoch's 40 batches at least";
}

// A forked child that lets go of its copy of the Loader leaves the owner's trace as it was.
TEST_F(TimeReport, AForkedChildLeavesTheOwnersTraceAlone) {
  const std::string path = tmp_.path("forked.json");
  Options o = options(1);
  o.trace = path;
  std::uint64_t batches = 0;
  {
    auto l = std::make_unique<Loader>(o);
    Epoch first = l->epoch(0);
    for (int k = 0; k < 3; ++k) batches += first.next().has_value();
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      l.reset();
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    while (first.next()) ++batches;
  }
  const nlohmann::json trace = read_trace(path);  // one "]", at the end
  std::uint64_t batch_spans = 0;
  for (const auto& e : events_of(trace, "X", 1)) batch_spans += e["name"].get<std::string>().rfind("batch ", 0) == 0;
  EXPECT_EQ(batch_spans, batches);
  EXPECT_EQ(trace.back()["name"], "stoker_dropped_events");
}

TEST_F(TimeReport, ATraceFileThatCannotBeWrittenIsRefusedNamingIt) {
  Options o = options(0);
  o.trace = tmp_.path("no-such-dir/run.json");
  expect_error(ErrorCode::io, [&] { Loader l(o); }, {"the trace file " + o.trace + " (Options::trace)"});
}

}  // namespace
}  // namespace stoker::test
