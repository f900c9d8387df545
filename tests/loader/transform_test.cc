// Options::transform (stoker/transform.h): a C++ transform run without workers, in workers forked
// from this process (the fork-only path), and in workers of a host that rebuilds it from its
// payload: this test program started with kTransformHostFlag (tests/support/main.cc), by the
// Loader or, asked questions first, ahead of it (StartedHost).
#include "stoker/transform.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoker/init.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"
#include "tests/support/test_transform.h"

namespace stoker::test {
namespace {

class Transforms : public ::testing::Test {
 protected:
  void SetUp() override {
    write_hdf5(tmp_.path("d.h5"), small_schema(kSamples), {formats::Hdf5WriteOptions::Layout::chunked, 8, 0});
  }

  Options options(std::size_t workers, std::int64_t factor = 1) const {
    Options o;
    o.source = tmp_.path("d.h5");
    o.batch_size = 6;
    o.num_workers = workers;
    o.shuffle = true;
    o.seed = 3;
    o.transform.fields = twice_and_ids_fields();
    o.transform.local = twice_and_ids(factor);
    return o;
  }

  // Every sample once, each as the transform makes it with `factor`.
  static void expect_transformed(Loader& loader, std::int64_t factor) {
    const Field label = small_schema(kSamples).fields[1];
    std::vector<int> seen(kSamples, 0);
    Epoch e = loader.epoch(1);
    while (auto b = e.next()) {
      const FieldView& twice = b->field("twice");
      const FieldView& ids = b->field("ids");
      ASSERT_EQ(ids.kind, FieldKind::bytes);
      for (std::size_t k = 0; k < b->size(); ++k) {
        const std::uint64_t i = b->indices()[k];
        std::int64_t want = 0, got = 0;
        std::memcpy(&want, expected_field(label, i).data(), 8);
        std::memcpy(&got, static_cast<const std::byte*>(twice.data) + 8 * k, 8);
        EXPECT_EQ(got,
                  static_cast<std::int64_t>(static_cast<std::uint64_t>(want) * 2u * static_cast<std::uint64_t>(factor)))
            << i;
        ASSERT_EQ(ids.offsets[k + 1] - ids.offsets[k], 4 * (i % 5)) << i;
        for (std::uint64_t n = 0; n < i % 5; ++n) {
          std::int32_t id = 0;
          std::memcpy(&id, static_cast<const std::byte*>(ids.data) + ids.offsets[k] + 4 * n, 4);
          EXPECT_EQ(id, static_cast<std::int32_t>(i));
        }
        ++seen[i];
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1);
  }

  static constexpr std::uint64_t kSamples = 40;
  TempDir tmp_;
};

TEST_F(Transforms, WithoutWorkersTheTransformRunsHere) {
  Loader loader(options(0));
  ASSERT_EQ(loader.schema().fields.size(), 2u);
  EXPECT_EQ(loader.schema().fields[0].describe(), "twice: i64[]");
  EXPECT_EQ(loader.schema().fields[1].describe(), "ids: bytes");
  expect_transformed(loader, 1);
}

TEST_F(Transforms, WorkersOfAHostRunTheTransformItRebuiltFromThePayload) {
  Options o = options(2);
  o.transform.host = {"/proc/self/exe", kTransformHostFlag};
  o.transform.payload = "5";  // the host's transform: factor 5, where this process's has 1
  Loader loader(o);
  expect_transformed(loader, 5);
}

// The answer to `question`, waited for up to 60 s.
std::string ask(StartedHost& host, const std::string& question) {
  host.ask(question, std::chrono::seconds(60));
  std::optional<std::string> answer = host.answer(std::chrono::seconds(60));
  if (!answer) throw std::runtime_error("no answer within 60 s to " + question);
  return *answer;
}

int parent_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 1));
  char state = 0;
  int ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

bool gone(int pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }  // ended and reaped

int oom_score_adj_of_process(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/oom_score_adj");
  int v = -1;
  in >> v;
  return v;
}

TEST_F(Transforms, AStartedHostAnswersThenItsWorkersAreForkedFromIt) {
  const std::shared_ptr<StartedHost> host = StartedHost::start({"/proc/self/exe", kTransformHostFlag});
  const int pid = host->pid();
  EXPECT_EQ(ask(*host, "pid"), std::to_string(pid));
  EXPECT_EQ(ask(*host, "hello"), "answer to hello");
  Options o = options(2);
  o.transform.host = {"/proc/self/exe", kTransformHostFlag};
  o.transform.payload = "5";
  o.transform.started = host;
  o.worker_oom_score_adj = 700;  // set on the host it takes, before any worker is forked
  Loader loader(o);
  EXPECT_EQ(host->pid(), -1) << "taken by the Loader";
  for (int w : loader.worker_pids()) {
    EXPECT_EQ(parent_of(w), pid) << "worker " << w;
    EXPECT_EQ(oom_score_adj_of_process(w), 700) << "worker " << w;
  }
  expect_transformed(loader, 5);
}

TEST_F(Transforms, AStartedHostWhoseAnswerWasNotReadIsReplacedByANewOne) {
  const std::shared_ptr<StartedHost> host = StartedHost::start({"/proc/self/exe", kTransformHostFlag});
  const int pid = host->pid();
  host->ask("hello", std::chrono::seconds(60));  // its answer never read: the socket is mid-exchange
  Options o = options(2);
  o.transform.host = {"/proc/self/exe", kTransformHostFlag};
  o.transform.payload = "5";
  o.transform.started = host;
  Loader loader(o);
  EXPECT_TRUE(gone(pid));
  for (int w : loader.worker_pids()) EXPECT_NE(parent_of(w), pid) << "worker " << w;
  expect_transformed(loader, 5);
}

TEST_F(Transforms, AStartedHostNoLoaderTakesIsEndedAndReaped) {
  std::shared_ptr<StartedHost> host = StartedHost::start({"/proc/self/exe", kTransformHostFlag});
  int pid = host->pid();
  EXPECT_EQ(ask(*host, "pid"), std::to_string(pid));
  Options o = options(0);  // without workers, the transform runs here
  o.transform.host = {"/proc/self/exe", kTransformHostFlag};
  o.transform.started = host;
  {
    Loader loader(o);
    expect_transformed(loader, 1);
  }
  EXPECT_EQ(host->pid(), -1);
  EXPECT_TRUE(gone(pid));
  host = StartedHost::start({"/proc/self/exe", kTransformHostFlag});
  pid = host->pid();
  host.reset();  // never asked, never taken
  EXPECT_TRUE(gone(pid));
}

TEST_F(Transforms, AStartedHostThatEndsOrFailsWhileAskedSaysHow) {
  std::shared_ptr<StartedHost> host = StartedHost::start({"/proc/self/exe", kTransformHostFlag});
  int pid = host->pid();
  expect_error(ErrorCode::transform, [&] { ask(*host, "exit"); },
               {fmt::format("the transform's host (pid {}) exited with status 3", pid)});
  EXPECT_TRUE(gone(pid));
  expect_error(ErrorCode::transform, [&] { ask(*host, "pid"); }, {"discarded or taken"});
  host = StartedHost::start({"/proc/self/exe", kTransformHostFlag});
  pid = host->pid();
  expect_error(ErrorCode::transform, [&] { ask(*host, "throw"); }, {"this host answers no such question"});
  EXPECT_TRUE(gone(pid));
  host = StartedHost::start({"/nonexistent/host"});
  pid = host->pid();
  expect_error(ErrorCode::transform, [&] { ask(*host, "pid"); },
               {"could not be started: exec: No such file or directory"});
  EXPECT_TRUE(gone(pid));
}

TEST_F(Transforms, WorkersStartedByExecNeedAHost) {
  if (!clean_workers()) {  // the fork-only path: the workers have this process's transform
    Loader loader(options(2));
    expect_transformed(loader, 1);
    return;
  }
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(options(2)); }, {"Options::transform.host"});
}

TEST_F(Transforms, AnErrorNamesTheSample) {
  for (const std::size_t workers : {0, 2}) {
    Options o = options(workers, 7);
    o.transform.host = {"/proc/self/exe", kTransformHostFlag};
    o.transform.payload = "7";
    Loader loader(o);
    Epoch e = loader.epoch(0);
    expect_error(ErrorCode::transform,
                 [&] {
                   while (e.next()) {
                   }
                 },
                 {"d.h5: sample 13: thirteen", "epoch 0"});
  }
}

TEST_F(Transforms, FieldsARingCannotHoldAreRefused) {
  Options o = options(0);
  o.transform.fields[1].max_sample_bytes = 0;
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(o); }, {"ragged field 'ids' has no max_sample_bytes"});
  o = options(0);
  o.transform.fields.push_back(o.transform.fields[0]);
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(o); }, {"field 'twice' is declared twice"});
  o = options(0);
  o.transform.local.reset();
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(o); }, {"neither a local transform nor a host"});
  o = options(2);
  o.transform.started = StartedHost::start({"/proc/self/exe", kTransformHostFlag});
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(o); }, {"a started host (Transform::started) without"});
  o = options(0);
  o.transform.local.reset();
  o.transform.host = {"/proc/self/exe", kTransformHostFlag};
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(o); },
               {"without workers the transform runs in this process", "Options::transform.local"});
}

}  // namespace
}  // namespace stoker::test
