// Multi-process behaviour, for real: killed and stuck workers, killed trainers, a small /dev/shm.
// Scenarios that must not disturb the test process run in a forked harness with a watchdog.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

#include "stoker/digest.h"
#include "stoker/error.h"
#include "stoker/init.h"
#include "stoker/loader.h"
#include "tests/support/hang_op.h"
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
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_FALSE(epoch.wait(std::chrono::milliseconds(100)));
  }
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
