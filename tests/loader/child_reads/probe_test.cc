// The probe's watch (loader/child_reads/probe.h): the parent reads the child's progress notes and its
// answer, and ends a child that goes quiet for the stall limit, or that the caller stops. The
// reading is tested on a socket this test writes (a child's notes, played by a thread); the whole
// probe on a dataset whose first read never ends, a FIFO nobody writes.
#include "loader/child_reads/probe.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "base/unique_fd.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using detail::ProbeRead;
using detail::read_probe_answer;
using std::chrono::milliseconds;
using ::testing::HasSubstr;

struct SocketPair {
  SocketPair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    parent.reset(sv[0]);
    child.reset(sv[1]);
  }
  void send(const std::string& text) const {
    ASSERT_EQ(::write(child.get(), text.data(), text.size()), ssize_t(text.size()));
  }
  detail::UniqueFd parent, child;
};

TEST(ProbeWatch, TheStallLimitIsTenSecondsOrTheTimeoutWhenShorterAndNoneWithoutATimeout) {
  EXPECT_EQ(detail::probe_stall_limit(std::chrono::minutes(5)), milliseconds(10'000));  // the default timeout
  EXPECT_EQ(detail::probe_stall_limit(milliseconds(300)), milliseconds(300));
  EXPECT_EQ(detail::probe_stall_limit(milliseconds(0)), milliseconds(0));  // timeout 0: never stuck
}

// The child's notes keep it alive however long it takes in all: here 12 notes a quarter of the
// limit apart, the answer three limits after the start.
TEST(ProbeWatch, AChildThatKeepsNotingProgressIsReadToItsAnswerHoweverLongItTakes) {
  SocketPair s;
  const milliseconds limit(1000);
  std::thread child([&] {
    for (int k = 0; k < 12; ++k) {
      std::this_thread::sleep_for(limit / 4);
      s.send(std::string(1, detail::kProgressNote));
    }
    s.send("{\"result\": 1}");
    s.child.reset();
  });
  std::string text;
  EXPECT_EQ(read_probe_answer(s.parent.get(), 1 << 20, limit, {}, text), ProbeRead::answered);
  child.join();
  EXPECT_EQ(text, "{\"result\": 1}");  // without the notes
}

TEST(ProbeWatch, AChildThatGoesQuietForTheLimitIsStalledWhateverItNotedBefore) {
  SocketPair s;
  s.send(std::string(3, detail::kProgressNote));
  std::string text;
  EXPECT_EQ(read_probe_answer(s.parent.get(), 1 << 20, milliseconds(200), {}, text), ProbeRead::stalled);
  EXPECT_EQ(text, "");
}

TEST(ProbeWatch, KeepGoingIsAskedWhileTheChildIsQuietAndStopsTheRead) {
  SocketPair s;
  int asked = 0;
  std::string text;
  // No stall limit: only keep_going ends the read.
  EXPECT_EQ(read_probe_answer(
                s.parent.get(), 1 << 20, milliseconds(0), [&] { return ++asked < 3; }, text),
            ProbeRead::stopped);
  EXPECT_EQ(asked, 3);
}

// A first read that never ends (a FIFO nobody writes: the probe's open blocks for good), with no
// stall limit (timeout 0): the caller's keep_going alone ends construction, at once, with the
// probe ended and waited for.
TEST(ProbeWatch, ALoaderWhoseKeepGoingSaysStopEndsItsProbeAndThrowsInterrupted) {
  TempDir tmp;
  const std::string fifo = tmp.path("never.h5");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Options o;
  o.source = fifo;
  o.num_workers = 1;
  o.timeout = milliseconds(0);
  int asked = 0;
  expect_error(ErrorCode::interrupted, [&] { Loader l(o, [&] { return ++asked < 5; }); },
               {fifo + ": building the loader was interrupted while its metadata was read"});
  EXPECT_EQ(asked, 5);
  EXPECT_TRUE(descendants().empty());
  // An exception keep_going throws passes through, the probe ended all the same.
  struct Stop {};
  EXPECT_THROW({ Loader l(o, []() -> bool { throw Stop{}; }); }, Stop);
  EXPECT_TRUE(descendants().empty());
}

}  // namespace
}  // namespace stoker::test
