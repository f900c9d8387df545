// Multi-process behaviour, for real: killed and stuck workers, killed trainers, a small /dev/shm.
// Scenarios that must not disturb the test process run in a forked harness with a watchdog.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stoker/digest.h"
#include "stoker/error.h"
#include "stoker/init.h"
#include "stoker/loader.h"
#include "stoker/pipeline.h"
#include "tests/support/hang_op.h"
#include "tests/support/hog_op.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

constexpr int kSkip = 77;

// Runs `body` in a forked child that SIGALRM ends after `watchdog_s`; returns its wait status.
int run_in_child(const std::function<int()>& body, unsigned watchdog_s = 60) {
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(watchdog_s);
    int rc = 1;
    try {
      rc = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "harness: %s\n", e.what());
      rc = 2;
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return st;
}

#define HARNESS_CHECK(cond)                                                            \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "harness: check failed at line %d: %s\n", __LINE__, #cond); \
      return 3;                                                                        \
    }                                                                                  \
  } while (0)

class Processes : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = small_schema(2000);
    write_lmdb(tmp_.path("d.lmdb"), schema_);
  }
  Options options(std::size_t workers) {
    Options o;
    o.source = tmp_.path("d.lmdb");
    o.num_workers = workers;
    o.batch_size = 10;
    return o;
  }
  TempDir tmp_;
  Schema schema_;
};

TEST_F(Processes, AKilledWorkerIsReportedWithItsPidAndSignalWithoutRespawns) {
  ::alarm(60);  // watchdog: a hang fails the test instead of CI
  Options o = options(2);
  o.max_respawns = 0;
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  ASSERT_TRUE(epoch.next());
  const int victim = loader.worker_pids().at(1);
  ASSERT_EQ(0, ::kill(victim, SIGKILL));
  std::string message;
  try {
    while (epoch.next()) {
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::worker_died) << e.what();
    message = e.what();
  }
  EXPECT_THAT(message, HasSubstr("worker 1 (pid " + std::to_string(victim) + ") was killed by signal SIGKILL"));
  // The loader stays broken and says so again.
  EXPECT_THROW(epoch.next(), Error);
  ::alarm(0);
}

// The pid hang_once wrote into the marker: the worker that hung (tests/support/hang_op.h).
int hung_pid(const std::string& marker) {
  std::ifstream in(marker);
  int pid = -1;
  in >> pid;
  return pid;
}

// Sets $STOKER_TEST_HANG_MARKER for one test (exec'd fork servers inherit it) and unsets it after.
struct HangMarker {
  explicit HangMarker(std::string p) : path(std::move(p)) { ::setenv(kHangMarkerEnv, path.c_str(), 1); }
  ~HangMarker() { ::unsetenv(kHangMarkerEnv); }
  std::string path;
};

TEST_F(Processes, AStuckWorkerIsReportedAfterTheTimeoutWithoutRespawns) {
  ::alarm(60);
  Options o = options(1);
  o.max_respawns = 0;
  o.timeout = std::chrono::milliseconds(300);
  o.shutdown_grace = std::chrono::milliseconds(100);
  o.pipeline = "label=hang_once(35)";  // sample 35: batch 3
  HangMarker marker(tmp_.path("hung"));
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  std::uint64_t delivered = 0;
  const Caught c = caught([&] {
    while (epoch.next()) ++delivered;
  });
  EXPECT_EQ(c.code, ErrorCode::worker_stuck) << c.message;
  EXPECT_EQ(delivered, 3u);
  const int victim = hung_pid(marker.path);
  EXPECT_EQ(victim, loader.worker_pids().at(0));
  EXPECT_THAT(c.message, HasSubstr("worker 0 (pid " + std::to_string(victim) + ") made no progress for"));
  EXPECT_THAT(c.message, HasSubstr("while loading batch 3 of epoch 0 (it could run: it was not stopped)"));
  EXPECT_THAT(c.message, HasSubstr("raise Options::timeout"));
  ::alarm(0);
}

// Whether `pid` is in the stopped state, as /proc says.
bool is_stopped(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'T';
}

// A worker stopped by SIGSTOP (or a debugger) could not run: however long it stays stopped, it is
// not stuck, and after SIGCONT the epoch goes on as if nothing happened.
// Under memory pressure the kernel's out-of-memory killer picks the process with the highest
// score: workers (replaced with an exact replay) are made likelier than the trainer, and never less
// likely than it, and 0 leaves them as the trainer is.
TEST_F(Processes, WorkersAreTheOutOfMemoryKillersFirstChoice) {
  const auto adj_of = [](int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/oom_score_adj");
    int v = -2000;
    in >> v;
    return v;
  };
  const int own = adj_of(::getpid());
  for (const int asked : {500, 0}) {
    Options o = options(2);
    o.worker_oom_score_adj = asked;
    Loader loader(o);
    const std::vector<int> children = descendants();
    ASSERT_EQ(children.size(), 3u) << "the fork server and two workers";
    for (const int pid : children) EXPECT_EQ(adj_of(pid), asked == 0 ? own : std::max(asked, own)) << pid;
  }
  Options bad = options(2);
  bad.worker_oom_score_adj = 1001;
  expect_error(ErrorCode::invalid_option, [&] { Loader l(bad); },
               {"options: worker_oom_score_adj 1001 is outside 0 .. 1000"});
}

TEST_F(Processes, AStoppedWorkerIsNotStuckHoweverLongItStaysStopped) {
  ::alarm(60);
  Options o = options(1);
  o.max_respawns = 0;
  o.timeout = std::chrono::milliseconds(300);
  std::vector<std::string> warnings;
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  ASSERT_TRUE(epoch.next());
  const int worker = loader.worker_pids().at(0);
  ASSERT_EQ(0, ::kill(worker, SIGSTOP));
  while (!is_stopped(worker)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::uint64_t delivered = 1;
  while (epoch.wait(std::chrono::milliseconds(100))) {  // what it filled before it stopped
    ASSERT_TRUE(epoch.next());
    ++delivered;
  }
  // Ten times the timeout in which the consumer waits for it and looks, and it stays stopped.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3000);
  std::uint64_t waits = 0;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_FALSE(epoch.wait(std::chrono::milliseconds(100)));
    ++waits;
  }
  // Each of those waits lasted its 100 ms, and the stall says so.
  EXPECT_GE(loader.stats().wait_seconds, 0.1 * static_cast<double>(waits));
  ASSERT_EQ(0, ::kill(worker, SIGCONT));
  while (epoch.next()) ++delivered;
  EXPECT_EQ(delivered, 200u);
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(loader.stats().respawns, 0u);
  ::alarm(0);
}

// The indices and bytes of one epoch, batch by batch, and the warnings seen.
struct EpochRecord {
  std::vector<std::vector<std::uint64_t>> indices;
  std::vector<std::vector<std::byte>> labels;
};

EpochRecord record(Epoch& epoch, const std::function<void(std::size_t)>& after_batch = {}) {
  EpochRecord r;
  std::size_t n = 0;
  while (auto b = epoch.next()) {
    r.indices.emplace_back(b->indices().begin(), b->indices().end());
    const FieldView& label = (*b)["label"];
    r.labels.emplace_back(label.data, label.data + label.bytes);
    if (after_batch) after_batch(n++);
  }
  return r;
}

// Epoch `epoch` of a loader built with `o`, run without interference: what a disturbed run must equal.
EpochRecord undisturbed_run(const Options& o, std::uint64_t epoch) {
  Loader loader(o);
  Epoch e = loader.epoch(epoch);
  return record(e);
}

TEST_F(Processes, KilledWorkersAreReplacedAndTheEpochIsExactlyAnUndisturbedOne) {
  ::alarm(60);
  Options o = options(2);
  o.shuffle = true;
  o.prefetch = 4;
  const EpochRecord want = undisturbed_run(o, 3);
  std::vector<std::string> warnings;
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  Loader loader(o);
  Epoch epoch = loader.epoch(3);
  std::vector<int> victims;
  double cpu_before_second_kill = 0;
  // Kill worker 1 after batch 5 and worker 0 after batch 40, each with work in flight.
  EpochRecord got = record(epoch, [&](std::size_t n) {
    if (n == 40) cpu_before_second_kill = loader.stats().worker_cpu_seconds;
    if (n == 5 || n == 40) {
      const int victim = loader.worker_pids().at(n == 5 ? 1 : 0);
      victims.push_back(victim);
      ASSERT_EQ(0, ::kill(victim, SIGKILL));
    }
  });
  EXPECT_EQ(got.indices, want.indices) << "the order of an undisturbed run";
  EXPECT_EQ(got.labels, want.labels) << "the contents of an undisturbed run";
  EXPECT_EQ(loader.stats().respawns, 2u);
  EXPECT_GE(loader.stats().worker_cpu_seconds, cpu_before_second_kill) << "a dead worker's CPU time still counts";
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("worker 1 (pid " + std::to_string(victims[0]) + ") was killed by signal SIGKILL"));
  EXPECT_THAT(warnings[0], HasSubstr("replaced by pid"));
  EXPECT_THAT(warnings[0], HasSubstr("(respawn 1 of at most 3)"));
  EXPECT_NE(loader.worker_pids().at(1), victims[0]);
  // The next epoch runs on the replacements.
  Epoch next = loader.epoch(4);
  std::size_t batches = 0;
  while (next.next()) ++batches;
  EXPECT_EQ(batches, loader.batches_per_epoch());
  ::alarm(0);
}

TEST_F(Processes, PastMaxRespawnsTheErrorNamesEveryDeath) {
  ::alarm(60);
  Options o = options(1);
  o.max_respawns = 1;
  o.on_warning = [](std::string_view) {};
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  ASSERT_TRUE(epoch.next());
  const int first = loader.worker_pids().at(0);
  ASSERT_EQ(0, ::kill(first, SIGKILL));
  // Batches already loaded still come; the death is noticed, and the worker replaced, by then.
  while (loader.worker_pids().at(0) == first) ASSERT_TRUE(epoch.next());
  const int second = loader.worker_pids().at(0);
  ASSERT_EQ(0, ::kill(second, SIGKILL));
  std::string message;
  try {
    while (epoch.next()) {
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::worker_died) << e.what();
    message = e.what();
  }
  EXPECT_THAT(message,
              HasSubstr("the loader cannot continue (all 2 worker deaths: worker 0 (pid " + std::to_string(first)));
  EXPECT_THAT(message, HasSubstr("worker 0 (pid " + std::to_string(second) + ") was killed by signal SIGKILL"));
  ::alarm(0);
}

TEST_F(Processes, AStuckWorkerIsKilledAndReplaced) {
  ::alarm(60);
  Options o = options(1);
  o.timeout = std::chrono::milliseconds(300);
  o.pipeline = "label=hang_once(35)";  // sample 35: batch 3
  std::vector<std::string> warnings;
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  const EpochRecord want = undisturbed_run(o, 0);
  ASSERT_TRUE(warnings.empty());
  HangMarker marker(tmp_.path("hung"));
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  EpochRecord got = record(epoch, [](std::size_t) {});
  EXPECT_EQ(got.indices, want.indices);
  EXPECT_EQ(got.labels, want.labels);
  const int victim = hung_pid(marker.path);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("worker 0 (pid " + std::to_string(victim) + ") made no progress for"));
  EXPECT_THAT(warnings[0], HasSubstr("while loading batch 3 of epoch 0 (it could run: it was not stopped) and was "
                                     "killed; replaced by pid"));
  ::alarm(0);
}

// A memory cgroup of its own under this process's (cgroup v1 or v2), limited to `bytes` with no
// swap; empty when none can be made here (not root, no memory controller).
struct MemoryCgroup {
  std::string dir;
  bool v2 = false;
  static bool write(const std::string& path, const std::string& value) {
    std::ofstream f(path);
    f << value;
    f.flush();
    return static_cast<bool>(f);
  }
  explicit MemoryCgroup(std::uint64_t bytes) {
    std::ifstream self("/proc/self/cgroup");
    std::string line, v1_path, v2_path;
    while (std::getline(self, line)) {
      const auto a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
      if (controllers == "memory" || controllers.find("memory,") == 0 || controllers.ends_with(",memory"))
        v1_path = "/sys/fs/cgroup/memory" + path;
      if (line.rfind("0::", 0) == 0) v2_path = "/sys/fs/cgroup" + path;
    }
    const std::string name = "/stoker-oom-test-" + std::to_string(::getpid());
    for (const std::string& base : {v1_path, v2_path}) {  // left by a run killed before its cleanup
      std::error_code ec;
      if (base.empty() || !std::filesystem::is_directory(base, ec)) continue;
      for (const auto& e : std::filesystem::directory_iterator(base, ec)) {
        const std::string n = e.path().filename().string();
        if (n.rfind("stoker-oom-test-", 0) != 0) continue;
        const pid_t owner = static_cast<pid_t>(std::atoll(n.c_str() + 16));
        if (owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH) ::rmdir(e.path().c_str());  // not a live run's
      }
    }
    // Without swap, or with a limit on it too: a worker short of memory is killed, not swapped out.
    std::ifstream swaps("/proc/swaps");
    std::string header, any;
    std::getline(swaps, header);
    const bool swap = static_cast<bool>(std::getline(swaps, any)) && !any.empty();
    if (!v1_path.empty() && ::mkdir((v1_path + name).c_str(), 0755) == 0) {
      dir = v1_path + name;
      const bool memsw = std::filesystem::exists(dir + "/memory.memsw.limit_in_bytes");
      if (!write(dir + "/memory.limit_in_bytes", std::to_string(bytes)) ||
          (memsw && !write(dir + "/memory.memsw.limit_in_bytes", std::to_string(bytes))) || (swap && !memsw))
        remove();
    } else if (!v2_path.empty() && std::filesystem::exists(v2_path + "/cgroup.controllers") &&
               ::mkdir((v2_path + name).c_str(), 0755) == 0) {
      // (A child of a cgroup whose parent does not delegate the memory controller has no memory.max.)
      dir = v2_path + name;
      v2 = true;
      if (!write(dir + "/memory.max", std::to_string(bytes)) || (!write(dir + "/memory.swap.max", "0") && swap))
        remove();
    }
  }
  ~MemoryCgroup() { remove(); }
  bool add(pid_t pid) const { return write(dir + "/cgroup.procs", std::to_string(pid)); }
  // The kernel's count of processes it killed for this cgroup's limit.
  std::uint64_t oom_kills() const {
    std::ifstream f(dir + (v2 ? "/memory.events" : "/memory.oom_control"));
    std::string key;
    std::uint64_t value = 0;
    while (f >> key >> value) {
      if (key == "oom_kill") return value;
    }
    return 0;
  }
  void remove() {
    if (dir.empty()) return;
    for (int i = 0; i < 200 && ::rmdir(dir.c_str()) != 0 && errno == EBUSY; ++i)  // its last processes exiting
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    dir.clear();
  }
};

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define STOKER_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(STOKER_TEST_SANITIZED)
constexpr bool kUnderSanitizer = true;  // their shadow memory makes resident sizes meaningless here
#else
constexpr bool kUnderSanitizer = false;
#endif

// A job in a 600 MiB memory cgroup: its training process holds 335 MiB (taken after its workers
// started, so that none shares it), then a worker takes memory until the limit is reached (about
// 245 MiB). The kernel's out-of-memory killer must kill one of them, the process of the largest
// oom_score: resident size plus oom_score_adj thousandths of the limit. With the workers' adj of
// 500 that is the worker (245 + 300 MiB against about 395), which is replaced, and the epoch is
// exactly an undisturbed one; with an adj of 0 it would be the trainer (395 against 245).
TEST_F(Processes, UnderAMemoryLimitTheKernelKillsAWorkerNotTheTrainer) {
  if (kUnderSanitizer) GTEST_SKIP() << "resident sizes under a sanitizer are not the process's";
  {
    std::ifstream own("/proc/self/oom_score_adj");
    int adj = 0;
    own >> adj;
    if (adj > 0) GTEST_SKIP() << "this process's oom_score_adj is " << adj << ": workers cannot be ranked above it";
  }
  ::alarm(120);
  constexpr std::uint64_t kMiB = 1u << 20;
  MemoryCgroup cgroup(600 * kMiB);
  if (cgroup.dir.empty())
    GTEST_SKIP() << "no memory cgroup can be made here (root, a memory controller delegated to this cgroup, and no "
                    "swap or a limit on it are needed)";
  Options o = options(1);
  o.pipeline = "label=hog_once(25,500)";  // in batch 2: more than the limit leaves
  o.timeout = std::chrono::seconds(30);   // were it not killed, a worker that sleeps holding it
  const EpochRecord want = undisturbed_run(o, 0);
  const std::string marker = tmp_.path("hogged");
  int go[2];
  ASSERT_EQ(0, ::pipe2(go, O_CLOEXEC));
  std::fflush(nullptr);
  const pid_t job = ::fork();
  if (job == 0) {
    ::close(go[1]);
    ::alarm(100);
    char c;
    if (::read(go[0], &c, 1) != 1) ::_exit(10);
    ::setenv(kHogMarkerEnv, marker.c_str(), 1);
    std::vector<std::string> warnings;
    o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
    try {
      Loader loader(o);  // its fork server and worker first: they share nothing of what follows
      void* held = ::mmap(nullptr, 335 * kMiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (held == MAP_FAILED) ::_exit(11);
      std::memset(held, 1, 335 * kMiB);  // the training process's own memory (a model, say)
      Epoch epoch = loader.epoch(0);
      const EpochRecord got = record(epoch);
      if (got.indices != want.indices || got.labels != want.labels) ::_exit(12);
      if (loader.stats().respawns != 1 || warnings.size() != 1) ::_exit(13);
      if (warnings[0].find("was killed by signal SIGKILL") == std::string::npos) {
        std::fprintf(stderr, "warning: %s\n", warnings[0].c_str());
        ::_exit(14);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "job: %s\n", e.what());
      ::_exit(15);
    }
    ::_exit(0);
  }
  ::close(go[0]);
  if (!cgroup.add(job)) {
    ::kill(job, SIGKILL);
    ::waitpid(job, nullptr, 0);
    FAIL() << "could not move the job into " << cgroup.dir;
  }
  ASSERT_EQ(1, ::write(go[1], "g", 1));
  ::close(go[1]);
  int st = 0;
  ASSERT_EQ(job, ::waitpid(job, &st, 0));
  ASSERT_FALSE(WIFSIGNALED(st)) << "the training process was killed by signal " << WTERMSIG(st)
                                << " (the out-of-memory killer chose it, not the worker)";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
      << "job exit " << WEXITSTATUS(st) << " (12: other batches; 13: not one respawn and one warning; 14: another "
      << "warning; 15: an error)";
  EXPECT_TRUE(std::filesystem::exists(marker)) << "the worker took the memory";
  EXPECT_GE(cgroup.oom_kills(), 1u) << "the kernel's out-of-memory killer ended the worker";
  ::alarm(0);
}

// More workers than one SCM_RIGHTS message carries descriptors for (253): the setup goes in pieces,
// and 300 workers deliver exactly the epoch that no worker does.
TEST_F(Processes, ThreeHundredWorkersDeliverExactlyTheEpochOfNone) {
  if (kUnderSanitizer) GTEST_SKIP() << "300 sanitized processes: the protocol is SetupChannel's test there";
  ::alarm(120);
  Options o = options(0);
  o.shuffle = true;
  const EpochRecord want = undisturbed_run(o, 1);
  o.num_workers = 300;
  o.prefetch = 1;
  Loader loader(o);
  EXPECT_EQ(loader.worker_pids().size(), 300u);
  Epoch epoch = loader.epoch(1);
  const EpochRecord got = record(epoch);
  EXPECT_EQ(got.indices, want.indices);
  EXPECT_EQ(got.labels, want.labels);
  EXPECT_EQ(loader.stats().respawns, 0u);
  ::alarm(0);
}

// nap on the i64 label field: passes it through, and holds sample 0 until the file named by
// $STOKER_TEST_NAP_MARKER exists (at most 30 s). An environment variable: the workers are exec'd
// images of this program, which know nothing of its variables.
constexpr const char* kNapMarkerEnv = "STOKER_TEST_NAP_MARKER";
OpSpec nap_spec(const OpSpec& in, std::span<const double>) { return in; }
void nap(const SampleIn& in, SampleOut& out, std::span<const double>, SampleRandom&) {
  std::memcpy(out.resize(in.dtype, in.shape), in.data.data(), in.data.size());
  static const std::vector<std::byte> first = expected_field(small_schema(1).fields[1], 0);
  if (std::memcmp(in.data.data(), first.data(), first.size()) != 0) return;
  const char* marker = std::getenv(kNapMarkerEnv);
  for (int k = 0; k < 3000 && marker && !std::filesystem::exists(marker); ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Whether thread `tid` of this process is blocked in poll(2) or ppoll(2), by the syscall number
// /proc shows first in its `syscall` file ("running" or -1 when it is in none).
bool sleeps_in_poll(pid_t tid) {
  std::ifstream in(fmt::format("/proc/self/task/{}/syscall", tid));
  long number = -1;
  if (!(in >> number)) return false;
#ifdef SYS_poll
  if (number == SYS_poll) return true;
#endif
  return number == SYS_ppoll;
}

// Batch 0 is held in its worker until the consumer sleeps waiting for it, and 300 ms more while
// the other worker finishes its batches: none of them wakes the consumer, which is woken once, by
// batch 0 (docs/shm-layout.md, awaited_slot). Nothing depends on timing: were the other worker
// slower than 300 ms, its batches would come after batch 0 and could not wake the consumer anyway.
TEST_F(Processes, TheConsumerIsWokenForTheBatchItWaitsForNotForThoseBeforeItsTurn) {
  const pid_t consumer = static_cast<pid_t>(::syscall(SYS_gettid));
  if (!std::filesystem::exists(fmt::format("/proc/self/task/{}/syscall", consumer))) {
    GTEST_SKIP() << "this kernel shows no thread's system call in /proc (CONFIG_HAVE_ARCH_TRACEHOOK)";
  }
  ::alarm(60);
  const std::string nap_marker = tmp_.path("consumer-sleeps");
  ::setenv(kNapMarkerEnv, nap_marker.c_str(), 1);  // before the loader starts its fork server
  Options o = options(2);
  o.prefetch = 4;
  o.pipeline = "label=nap";
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  std::atomic<bool> seen_asleep = false;
  std::thread release([&] {
    for (int k = 0; k < 3000 && !seen_asleep; ++k) {
      seen_asleep = sleeps_in_poll(consumer);
      if (!seen_asleep) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ofstream{nap_marker};
  });
  struct JoinAndUnset {  // also when next() throws: a joinable thread's destructor would terminate
    std::thread& thread;
    ~JoinAndUnset() {
      thread.join();
      ::unsetenv(kNapMarkerEnv);
    }
  };
  bool first = false;
  {
    JoinAndUnset join{release};
    first = epoch.next().has_value();
  }
  ASSERT_TRUE(first);
  ASSERT_TRUE(seen_asleep) << "the consumer was never seen asleep waiting for batch 0";
  EXPECT_EQ(loader.stats().consumer_wakes, 1u) << "0: batch 0 did not wake it; more: worker 1's batches did";
  std::size_t batches = 1;
  while (epoch.next()) ++batches;
  EXPECT_EQ(batches, loader.batches_per_epoch());
  EXPECT_LE(loader.stats().consumer_wakes, batches) << "at most one wake per batch";
  ::alarm(0);
}

// A setup larger than one packet (a thousand fields of long names) reaches every worker whole.
TEST(ProcessSetup, AThousandFieldsOfLongNamesReachTheWorkers) {
  ::alarm(120);
  TempDir tmp;
  Schema schema;
  schema.num_samples = 24;
  for (int k = 0; k < 1000; ++k) {
    schema.fields.push_back(
        {fmt::format("field_{:04d}_{}", k, std::string(150, 'n')), FieldKind::fixed, DType::i64, {}});
  }
  write_hdf5(tmp.path("wide.h5"), schema, {});
  Options o;
  o.source = tmp.path("wide.h5");
  o.batch_size = 8;
  o.num_workers = 2;
  Loader loader(o);
  std::uint64_t samples = 0;
  for (Batch& b : loader.epoch(0)) {
    ASSERT_EQ(b.fields().size(), 1000u);
    for (const std::size_t f : {std::size_t{0}, std::size_t{517}, std::size_t{999}}) {
      const FieldView& v = b.field(schema.fields[f].name);
      for (std::size_t k = 0; k < b.size(); ++k) {
        const auto want = expected_field(schema.fields[f], b.indices()[k]);
        EXPECT_EQ(0, std::memcmp(v.data + k * want.size(), want.data(), want.size())) << f << " " << k;
      }
    }
    samples += b.size();
  }
  EXPECT_EQ(samples, 24u);
  ::alarm(0);
}

// With stoker::init a dead fork server is replaced, as a worker is; on the fork-only path it is
// not (a new one would be forked from this multi-threaded process), and the error says so.
TEST_F(Processes, AKilledForkServerIsReplacedWhenWorkersStartClean) {
  ::alarm(60);
  Options o = options(2);
  std::vector<std::string> warnings;
  o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
  const EpochRecord want = undisturbed_run(o, 0);
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  int server = 0;
  std::string error;
  EpochRecord got;
  try {
    got = record(epoch, [&](std::size_t n) {
      if (n == 5) {
        server = parent_of(loader.worker_pids().at(0));
        std::ifstream comm("/proc/" + std::to_string(server) + "/comm");
        std::string name;
        std::getline(comm, name);
        ASSERT_EQ(name, "stoker-forksrv") << "worker " << loader.worker_pids().at(0) << " parent " << server;
        ASSERT_EQ(0, ::kill(server, SIGKILL));
        // Its death completes before the next batch is asked for (tearing down a large address
        // space, as an ASan process has, takes a while; its socket closes only after that).
        for (int i = 0; i < 5000; ++i) {
          std::ifstream status("/proc/" + std::to_string(server) + "/status");
          std::string line, state = "gone";
          while (std::getline(status, line)) {
            if (line.rfind("State:", 0) == 0) state = line;
          }
          if (state == "gone" || state.find('Z') != std::string::npos) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      }
    });
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::worker_died) << e.what();  // on the fork-only path; with init, none comes
    error = e.what();
  }
  ASSERT_GT(server, 0);
  if (!clean_workers()) {
    EXPECT_THAT(error, HasSubstr("the fork server (pid " + std::to_string(server) + ") was killed by signal SIGKILL"));
    EXPECT_THAT(error, HasSubstr("a fork server is replaced only when the program called stoker::init"));
  } else {
    EXPECT_EQ(error, "");
    EXPECT_EQ(got.indices, want.indices);
    EXPECT_EQ(got.labels, want.labels);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_THAT(warnings[0],
                HasSubstr("the fork server (pid " + std::to_string(server) + ") was killed by signal SIGKILL"));
    EXPECT_THAT(warnings[0], HasSubstr("a new fork server (pid "));
    EXPECT_EQ(loader.stats().respawns, 1u);
    // The new workers deliver the next epoch too.
    Epoch next = loader.epoch(1);
    EXPECT_EQ(record(next).indices.size(), want.indices.size());
  }
  ::alarm(0);
}

// A forked child (a user's fork(), a multiprocessing worker) inherits a copy of the Loader: using it
// there is an error naming the owner, and destroying it there leaves the owner's workers, ring and
// fork server as they were: the owner's epoch is exactly an undisturbed one.
TEST_F(Processes, AForkedChildCanNeitherUseNorStopItsParentsLoader) {
  ::alarm(60);
  Options o = options(2);
  const EpochRecord want = undisturbed_run(o, 0);
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  const std::vector<int> workers = loader.worker_pids();
  EpochRecord got = record(epoch, [&](std::size_t n) {
    if (n != 3) return;
    const int st = run_in_child([&] {
      const std::string owner = std::to_string(::getppid());
      try {
        (void)epoch.next();
        return 4;  // used in the child: wrong
      } catch (const Error& e) {
        HARNESS_CHECK(e.code() == ErrorCode::wrong_process);
        HARNESS_CHECK(std::string(e.what()).find("belongs to process " + owner) != std::string::npos);
      }
      return 0;
    });
    ASSERT_TRUE(WIFEXITED(st)) << st;
    ASSERT_EQ(WEXITSTATUS(st), 0);
    // And one that destroys its copy, as a child that returns from main would.
    const int destroyed = run_in_child([&] {
      std::destroy_at(&loader);  // the child's copy of the parent's Loader (the child then _exits)
      return 0;
    });
    ASSERT_TRUE(WIFEXITED(destroyed)) << destroyed;
    ASSERT_EQ(WEXITSTATUS(destroyed), 0);
  });
  EXPECT_EQ(got.indices, want.indices);
  EXPECT_EQ(got.labels, want.labels);
  EXPECT_EQ(loader.worker_pids(), workers) << "no worker was replaced";
  EXPECT_EQ(loader.stats().respawns, 0u);
  ::alarm(0);
}

TEST_F(Processes, NoProcessAndNoShmEntryRemainAfterTheLoader) {
  ASSERT_TRUE(descendants().empty());
  {
    Loader loader(options(3));
    for (Batch& b : loader.epoch(0)) (void)b;
    EXPECT_EQ(descendants().size(), 4u);  // fork server + 3 workers
    EXPECT_TRUE(shm_entries_of(::getpid()).empty()) << "segments are unlinked as soon as they exist";
  }
  EXPECT_TRUE(descendants().empty());
  EXPECT_TRUE(shm_entries_of(::getpid()).empty());
}

TEST_F(Processes, AKilledTrainerLeavesNoProcessAndNoShmEntry) {
  int st = run_in_child([&]() -> int {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphans come to this harness, which checks they end
    int ready[2];
    HARNESS_CHECK(::pipe(ready) == 0);
    pid_t trainer = ::fork();
    if (trainer == 0) {
      ::close(ready[0]);
      Loader loader(options(3));
      Epoch epoch = loader.epoch(0);
      auto a = epoch.next();
      auto b = epoch.next();
      std::vector<int> pids = loader.worker_pids();
      (void)!::write(ready[1], pids.data(), pids.size() * sizeof(int));
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    int workers[3];
    HARNESS_CHECK(::read(ready[0], workers, sizeof workers) == sizeof workers);
    HARNESS_CHECK(::kill(trainer, SIGKILL) == 0);
    HARNESS_CHECK(::waitpid(trainer, nullptr, 0) == trainer);
    // Everything left (the fork server, reparented here) must end by itself.
    while (::waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
    }
    HARNESS_CHECK(errno == ECHILD);
    for (int w : workers) HARNESS_CHECK(::kill(w, 0) != 0 && errno == ESRCH);
    HARNESS_CHECK(shm_entries_of(trainer).empty());
    HARNESS_CHECK(descendants().empty());
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(st)) << "harness status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

// A child the trainer forks without exec (a subprocess being set up, a multiprocessing worker)
// inherits the trainer's descriptors; it must not keep the workers alive once the trainer is gone.
TEST_F(Processes, AUserForkDoesNotKeepWorkersAliveAfterTheTrainerIsKilled) {
  int st = run_in_child([&]() -> int {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    int ready[2];
    HARNESS_CHECK(::pipe(ready) == 0);
    pid_t trainer = ::fork();
    if (trainer == 0) {
      ::close(ready[0]);
      Loader loader(options(2));
      Epoch epoch = loader.epoch(0);
      auto a = epoch.next();
      pid_t user_child = ::fork();  // the user's, without exec: it lives on
      if (user_child == 0) {
        ::sleep(60);
        ::_exit(0);
      }
      std::vector<int> pids = loader.worker_pids();
      pids.push_back(user_child);
      (void)!::write(ready[1], pids.data(), pids.size() * sizeof(int));
      ::pause();
      ::_exit(0);
    }
    ::close(ready[1]);
    int got[3];
    HARNESS_CHECK(::read(ready[0], got, sizeof got) == sizeof got);
    HARNESS_CHECK(::kill(trainer, SIGKILL) == 0);
    HARNESS_CHECK(::waitpid(trainer, nullptr, 0) == trainer);
    // The workers end within seconds although the user's child still runs. (Running: in /proc
    // and not a zombie; orphans are reparented here and reaped as they end.)
    auto running = [](int pid) {
      const char state = state_of(pid);
      return state != '\0' && state != 'Z';
    };
    for (int i = 0; i < 200 && (running(got[0]) || running(got[1])); ++i) {
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      ::usleep(50'000);
    }
    HARNESS_CHECK(!running(got[0]) && !running(got[1]));
    HARNESS_CHECK(running(got[2]));  // the user's child was alive all along
    ::kill(got[2], SIGKILL);
    while (::waitpid(-1, nullptr, 0) > 0 || errno == EINTR) {
    }
    HARNESS_CHECK(descendants().empty());
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(st)) << "harness status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

TEST(SmallDevShm, MovesToMemfdLowersDepthOrRefusesAndNeverDiesOfSigbus) {
  TempDir tmp;
  Schema schema;
  schema.num_samples = 48;
  schema.fields = {{"pixels", FieldKind::fixed, DType::u8, {256, 1024}}, {"label", FieldKind::fixed, DType::i64, {}}};
  write_lmdb(tmp.path("big.lmdb"), schema);
  int st = run_in_child([&]() -> int {
    if (::unshare(CLONE_NEWNS) != 0) return kSkip;
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return kSkip;
    if (::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64m") != 0) return kSkip;
    std::vector<std::string> warnings;
    Options o;
    o.source = tmp.path("big.lmdb");
    o.batch_size = 16;  // 4 MiB a batch
    o.num_workers = 2;
    o.prefetch = 8;  // wants 16 slots = 64 MiB; half of 64 MiB fits 7
    o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
    // Automatic backing: /dev/shm cannot hold 64 MiB, memfd memory can, at full depth.
    {
      Loader loader(o);
      HARNESS_CHECK(loader.stats().depth == 16);
      HARNESS_CHECK(loader.stats().shm_backing == ShmBacking::memfd);
      HARNESS_CHECK(warnings.size() == 1);
      HARNESS_CHECK(warnings[0].find("/dev/shm cannot hold the ring") != std::string::npos);
      std::uint64_t samples = 0;
      for (Batch& b : loader.epoch(0)) samples += b.size();
      HARNESS_CHECK(samples == 48);
    }
    warnings.clear();
    // Forced into /dev/shm: lowered, as before there was a memfd fallback.
    o.shm_backing = ShmBacking::dev_shm;
    {
      Loader loader(o);
      HARNESS_CHECK(loader.stats().depth < 16 && loader.stats().depth >= 2);
      HARNESS_CHECK(warnings.size() == 1);
      HARNESS_CHECK(warnings[0].find("ring lowered from 16 to") != std::string::npos);
      std::uint64_t samples = 0;
      for (int epoch = 0; epoch < 2; ++epoch) {
        for (Batch& b : loader.epoch(epoch)) {
          for (std::size_t k = 0; k < b.size(); ++k) {
            auto want = expected_field(schema.fields[1], b.indices()[k]);
            HARNESS_CHECK(std::memcmp(b["label"].data + 8 * k, want.data(), 8) == 0);
            auto px = expected_field(schema.fields[0], b.indices()[k]);
            HARNESS_CHECK(std::memcmp(b["pixels"].data + px.size() * k, px.data(), px.size()) == 0);
          }
          samples += b.size();
        }
      }
      HARNESS_CHECK(samples == 96);
    }
    o.batch_size = 40;  // 10 MiB a batch: 4 workers need 40 MiB, more than half of 64 MiB
    o.num_workers = 4;
    try {
      Loader loader(o);
      std::fprintf(stderr, "harness: no error for a loader that cannot fit\n");
      return 4;
    } catch (const Error& e) {
      std::string m = e.what();
      std::fprintf(stderr, "harness: refused as expected: %s\n", e.what());
      HARNESS_CHECK(e.code() == ErrorCode::shm);
      HARNESS_CHECK(m.find("not enough shared memory for 4 workers") != std::string::npos);
      HARNESS_CHECK(m.find("needs 40.") != std::string::npos);
      HARNESS_CHECK(m.find("/dev/shm") != std::string::npos);
      HARNESS_CHECK(m.find("--shm-size=") != std::string::npos);
      HARNESS_CHECK(m.find("fewer workers") != std::string::npos);
    }
    return 0;
  });
  ASSERT_TRUE(WIFEXITED(st)) << "harness died: " << (WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "?");
  if (WEXITSTATUS(st) == kSkip) GTEST_SKIP() << "mount namespaces are not permitted here (unshare/mount failed)";
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

}  // namespace
}  // namespace stoker::test

STOKER_REGISTER_OP(nap, stoker::test::nap_spec, stoker::test::nap);
