// loader/children: the one way the loader starts a child process. The child runs a function or
// execs an image given its socket by number, its fork goes through Env, and it is reaped on every way
// out: killed when its ChildProcess goes before it ended.
#include "loader/children/child_process.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "base/env.h"
#include "stoker/error.h"

namespace stoker {
namespace {

using detail::ChildProcess;
using detail::ExecImage;
using ::testing::HasSubstr;

std::string read_all(int fd) {
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  return out;
}

TEST(ChildProcess, TheChildRunsItsFunctionWithItsEndOfTheSocketAndIsReaped) {
  ChildProcess child("a test child", SOCK_STREAM, ChildProcess::Tie::to_this_thread, [](int sock) {
    (void)::write(sock, "hello", 5);
    ::_exit(3);
  });
  EXPECT_EQ(read_all(child.socket()), "hello");
  const int status = child.wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_TRUE(child.reaped());
  EXPECT_EQ(child.wait(), status);  // once reaped, at once
}

TEST(ChildProcess, AChildStillRunningWhenItsOwnerGoesIsKilledAndReaped) {
  pid_t pid = -1;
  {
    ChildProcess child("a test child", SOCK_STREAM, ChildProcess::Tie::to_this_thread, [](int) {
      for (;;) ::pause();
    });
    pid = child.pid();
    ASSERT_GT(pid, 0);
  }
  // Reaped: no such child of this process any more.
  errno = 0;
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(ChildProcess, AnExecdImageFindsItsSocketByTheNumberInItsEnvironment) {
  ::setenv("STOKER_TEST_SOCKET", "stale", 1);  // the parent's value is replaced, not passed on
  ExecImage image("/bin/sh", {"sh", "-c", "printf 'fd %s' \"$STOKER_TEST_SOCKET\" >&\"$STOKER_TEST_SOCKET\""},
                  "STOKER_TEST_SOCKET");
  ChildProcess child("a test child", SOCK_STREAM, ChildProcess::Tie::to_this_thread, [&](int sock) {
    image.exec(sock);
    ::_exit(127);
  });
  const std::string said = read_all(child.socket());
  ::unsetenv("STOKER_TEST_SOCKET");
  EXPECT_THAT(said, ::testing::MatchesRegex("fd [0-9]+"));
  const int status = child.wait();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The fork goes through Env: a test makes it fail, and the error names the child.
class FailingFork : public detail::Env {
 public:
  FailingFork() : previous_(detail::Env::install(this)) {}
  ~FailingFork() override { detail::Env::install(previous_); }
  pid_t fork() override {
    errno = EAGAIN;
    return -1;
  }

 private:
  detail::Env* previous_;
};

TEST(ChildProcess, AForkThatFailsIsAnErrorNamingTheChild) {
  FailingFork env;
  try {
    ChildProcess child("the probe that reads the dataset's metadata", SOCK_STREAM, ChildProcess::Tie::to_this_thread,
                       [](int) { ::_exit(0); });
    FAIL() << "expected stoker::Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fork of the probe that reads the dataset's metadata"));
    EXPECT_THAT(e.what(), HasSubstr("EAGAIN"));
  }
}

}  // namespace
}  // namespace stoker
