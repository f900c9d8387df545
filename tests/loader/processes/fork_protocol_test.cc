// The fork protocol's messages (loader/processes/fork_protocol.h) between two ends of a real
// SOCK_SEQPACKET socket pair: a process that ended with a packet of ours unread leaves a reset
// pending ahead of what it sent before it ended, and the message is still read.
#include "loader/processes/fork_protocol.h"

#include <gtest/gtest.h>
#include <sys/socket.h>

#include <cerrno>

#include "base/unique_fd.h"

namespace stoker::test {
namespace {

using detail::Message;
using detail::MsgType;

TEST(ForkProtocol, TheMessageOfAPeerThatEndedWithOurPacketUnreadIsReadPastTheReset) {
  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends), 0);
  detail::UniqueFd ours(ends[0]), theirs(ends[1]);
  ASSERT_TRUE(detail::send_msg(ours.get(), Message{MsgType::spawn, 0, 0, 0, 0}));  // never read
  ASSERT_TRUE(detail::send_msg(theirs.get(), Message{MsgType::spawn_failed, detail::kServer, 0, ENOENT, 0}));
  theirs.reset();  // as a process that exits

  Message m{};
  ASSERT_EQ(detail::recv_packet(ours.get(), &m, sizeof m, MSG_DONTWAIT), static_cast<ssize_t>(sizeof m));
  EXPECT_EQ(m.type, MsgType::spawn_failed);
  EXPECT_EQ(m.status, ENOENT);
  EXPECT_EQ(detail::recv_packet(ours.get(), &m, sizeof m, MSG_DONTWAIT), 0);  // then the end
}

TEST(ForkProtocol, WithoutAResetAPacketIsReadAsItCame) {
  int ends[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends), 0);
  detail::UniqueFd ours(ends[0]), theirs(ends[1]);
  Message m{};
  EXPECT_EQ(detail::recv_packet(ours.get(), &m, sizeof m, MSG_DONTWAIT), -1);
  EXPECT_EQ(errno, EAGAIN);
  ASSERT_TRUE(detail::send_msg(theirs.get(), Message{MsgType::spawned, 3, 1234, 0, 0}));
  ASSERT_EQ(detail::recv_packet(ours.get(), &m, sizeof m, MSG_DONTWAIT), static_cast<ssize_t>(sizeof m));
  EXPECT_EQ(m.type, MsgType::spawned);
  EXPECT_EQ(m.pid, 1234);
}

}  // namespace
}  // namespace stoker::test
