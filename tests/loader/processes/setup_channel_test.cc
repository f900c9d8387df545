// loader/processes: the setup an exec'd fork server receives, sent in pieces, and the exit statuses
// that say why a fork server or worker ended.
#include "loader/processes/setup_channel.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "loader/processes/fork_protocol.h"

namespace stoker::detail {
namespace {

// More text than one packet holds and more descriptors than one SCM_RIGHTS message carries (253):
// a setup for 600 workers with a schema of long field names.
TEST(SetupChannel, ALargeSetupAndHundredsOfDescriptorsArriveWhole) {
  int sv[2];
  ASSERT_EQ(0, ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv));
  UniqueFd sender(sv[0]), receiver(sv[1]);
  std::string text;
  for (int i = 0; text.size() < (3u << 20); ++i) text += "field_with_a_rather_long_name_" + std::to_string(i) + ",";
  std::vector<UniqueFd> pipes;
  std::vector<int> fds;
  for (int i = 0; i < 300; ++i) {
    int p[2];
    ASSERT_EQ(0, ::pipe2(p, O_CLOEXEC));
    pipes.emplace_back(p[0]);
    pipes.emplace_back(p[1]);
    fds.push_back(p[0]);
    fds.push_back(p[1]);
  }
  ReceivedSetup got;
  std::thread reader([&] { got = receive_setup(receiver.get()); });
  send_setup(sender.get(), text, fds);
  reader.join();
  EXPECT_EQ(got.text, text);
  ASSERT_EQ(got.fds.size(), fds.size());
  // The same open files, in order: same inode as what was sent.
  for (std::size_t i = 0; i < fds.size(); ++i) {
    struct stat a {
    }, b{};
    ASSERT_EQ(0, ::fstat(fds[i], &a));
    ASSERT_EQ(0, ::fstat(got.fds[i].get(), &b));
    EXPECT_EQ(a.st_ino, b.st_ino) << "descriptor " << i;
    EXPECT_EQ(::fcntl(got.fds[i].get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  }
}

TEST(SetupChannel, APeerThatClosesEarlyIsAnError) {
  int sv[2];
  ASSERT_EQ(0, ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv));
  UniqueFd receiver(sv[1]);
  ::close(sv[0]);
  EXPECT_THROW(receive_setup(receiver.get()), std::exception);
}

TEST(ChildExits, SayWhatTheyMean) {
  const auto exited = [](ChildExit e) { return static_cast<int>(e) << 8; };  // as waitpid reports it
  EXPECT_EQ(describe_wait_status(exited(ChildExit::setup_failed)),
            "exited with status 73 (the fork server could not use its setup)");
  EXPECT_THAT(describe_wait_status(exited(ChildExit::worker_threw)), ::testing::HasSubstr("a bug in stoker"));
  EXPECT_EQ(describe_wait_status(3 << 8), "exited with status 3");
  EXPECT_EQ(describe_wait_status(SIGKILL), "was killed by signal SIGKILL");
}

}  // namespace
}  // namespace stoker::detail
