// One object's bytes into a file (remote/http_fetch.h), larger than the pieces it is written in: a
// transfer broken off or stopped mid-body leaves every byte that came in the file, and no more of
// the disk, and the resume asks for the rest; a disk with no room for the object fails before a
// byte is fetched, and a write that fails says how much was still to come.
#include "remote/http_fetch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>

#include "remote/content_digest.h"
#include "remote/partial_file.h"
#include "stoker/error.h"
#include "tests/remote/remote_fixtures.h"
#include "tests/support/run_process.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

TEST(HttpFetch, ALargeObjectBrokenOffMidBodyIsResumedWhereItsBytesEnd) {
  TempDir tmp;
  const std::string bytes = write_big_object(tmp, "served");
  // Broken off after 1.5 MiB (one piece written, half of the next held back), then after 1.1 MiB
  // more: every byte that came is in the file, and each resume asks for the rest.
  FaultServer server(tmp, tmp.path("served"), R"({"big.bin": ["reset:1572864", "reset:1153434"]})");
  const remote::RemoteObject object{server.url("big.bin"), server.url("big.bin"), {}};
  remote::FetchCounters counters;
  const std::string partial = tmp.path("big.bin.partial");
  const std::uint64_t digest =
      remote::fetch_object(object, remote::ObjectInfo{bytes.size(), ""}, partial, quick_policy(), counters);

  EXPECT_TRUE(file_bytes(partial) == bytes);  // not EXPECT_EQ: 3 MiB in a failure message
  remote::ContentDigest whole;
  whole.add(bytes.data(), bytes.size());
  EXPECT_EQ(digest, whole.value());
  EXPECT_EQ(counters.bytes.load(), bytes.size());
  EXPECT_EQ(counters.retries.load(), 2u);
  EXPECT_EQ(server.log(), "GET big.bin -\nGET big.bin bytes=1572864-\nGET big.bin bytes=2726298-\n");
}

TEST(HttpFetch, AFetchStoppedMidBodyKeepsWhatCameAndGivesBackTheRestOfItsBlocks) {
  TempDir tmp;
  const std::string bytes = write_big_object(tmp, "served");
  // 1.5 MiB, then nothing for 5 s: the fetch is stopped in that pause, with 0.5 MiB held back.
  FaultServer server(tmp, tmp.path("served"), R"({"big.bin": ["stall:1572864:5"]})");
  const remote::RemoteObject object{server.url("big.bin"), server.url("big.bin"), {}};
  const remote::ObjectInfo info{bytes.size(), ""};
  const std::string partial = tmp.path("big.bin.partial");
  remote::FetchCounters counters;
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    while (counters.bytes < 1572864) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stop = true;
  });
  remote::FetchPolicy policy = quick_policy();
  policy.stop = &stop;
  const Caught stopped = caught([&] { remote::fetch_object(object, info, partial, policy, counters); });
  stopper.join();
  EXPECT_EQ(stopped.code, ErrorCode::interrupted) << stopped.message;
  EXPECT_TRUE(file_bytes(partial) == bytes.substr(0, 1572864));
  EXPECT_LE(remote::allocated_bytes(partial), 1572864u + (64u << 10));  // not the 3 MiB reserved

  // The next fetch asks for the rest.
  remote::fetch_object(object, info, partial, quick_policy(), counters);
  EXPECT_TRUE(file_bytes(partial) == bytes);
  EXPECT_EQ(server.log(), "GET big.bin -\nGET big.bin bytes=1572864-\n");
}

TEST(HttpFetch, AWriteThatFailsMidBodySaysHowMuchWasStillToComeAndKeepsWhatWasWritten) {
  TempDir tmp;
  const std::string bytes = write_big_object(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  const std::string partial = tmp.path("big.bin.partial");
  // In a child whose files may not grow past 2 MiB (RLIMIT_FSIZE: a write past it fails with EFBIG,
  // as one onto a full disk fails with ENOSPC); the reservation, which keeps the size, is allowed.
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{2u << 20, 2u << 20};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const remote::RemoteObject object{server.url("big.bin"), "http://store/big.bin", {}};
    remote::FetchCounters counters;
    const Caught failed = caught([&] {
      remote::fetch_object(object, remote::ObjectInfo{bytes.size(), ""}, partial, quick_policy(), counters);
    });
    const std::string want =
        fmt::format("writing the download of http://store/big.bin: File too large ({} of its {} bytes still to come)",
                    bytes.size() - (2u << 20), bytes.size());
    if (failed.code == ErrorCode::io && failed.message == want) ::_exit(0);
    std::fprintf(stderr, "got: %s\n", failed.message.c_str());
    ::_exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(file_bytes(partial) == bytes.substr(0, 2u << 20));
  EXPECT_LE(remote::allocated_bytes(partial), (2u << 20) + (64u << 10));
}

TEST(HttpFetch, ADiskWithoutRoomForTheObjectFailsBeforeAByteIsFetched) {
  TempDir tmp;
  const std::string bytes = write_big_object(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  const std::string disk = tmp.path("disk");
  const int rc = with_small_tmpfs(disk, 1u << 20, [&] {
    const remote::RemoteObject object{server.url("big.bin"), "http://store/big.bin", {}};
    remote::FetchCounters counters;
    try {
      remote::fetch_object(object, remote::ObjectInfo{bytes.size(), ""}, disk + "/big.bin.partial", quick_policy(),
                           counters);
    } catch (const Error& e) {
      const std::string want = fmt::format(
          "writing the download of http://store/big.bin: No space left on device ({0} of its {0} bytes still to come)",
          bytes.size());
      if (e.code() == ErrorCode::io && e.what() == want && counters.bytes == 0) return 0;
      std::fprintf(stderr, "got: %s (%llu bytes fetched)\n", e.what(),
                   static_cast<unsigned long long>(counters.bytes.load()));
      return 1;
    }
    return 2;
  });
  if (rc == 77) GTEST_SKIP() << "no mount namespace for a small tmpfs here";
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(server.log(), "");
}

}  // namespace
}  // namespace stoker::test
