// The protocol between a loader (its ForkServer, loader/processes/fork_server.h) and its fork server
// process (loader/processes/server_loop.h): fixed-size messages on a SOCK_SEQPACKET socket. The
// exit statuses by which a fork server or a worker that cannot go on says why are ChildExit
// (loader/children/child_exit.h).
//
//   loader -> server   spawn (worker w: fork a replacement), shutdown (arg: grace in ms), kill
//                      (worker w, pid: SIGKILL it if it is still that process, not yet reaped)
//   server -> loader   spawned (w, pid), exited (w, pid, wait status), spawn_failed (w, errno; w =
//                      kServer: the exec of the server itself), setup_failed (then one packet: why),
//                      shutdown_done
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "loader/children/child_exit.h"

namespace stoker::detail {

enum class MsgType : std::uint32_t {
  spawned = 1,
  exited = 2,
  shutdown = 3,
  shutdown_done = 4,
  spawn = 5,
  spawn_failed = 6,
  setup_failed = 7,
  kill = 8,
};

// The `worker` of a message about the fork server itself.
inline constexpr std::uint32_t kServer = 0xffffffffu;

struct Message {
  MsgType type;
  std::uint32_t worker;
  std::int32_t pid;
  std::int32_t status;
  std::int64_t arg;
};

// Sends one message; false when the socket is gone. Async-signal-safe (a child between fork and
// exec uses it).
bool send_msg(int sock, const Message& m) noexcept;

// Receives one packet of at most `size` bytes, as recv(2) with `flags`, EINTR retried. A process
// that exits with a packet of ours unread leaves ECONNRESET pending on our end, and Linux reports
// a datagram socket's pending error ahead of the packets queued before it: the reset is passed, so
// that the message the process sent before it ended (a spawn_failed, a setup_failed) is read.
ssize_t recv_packet(int sock, void* buf, std::size_t size, int flags) noexcept;

// The environment variable that tells stoker::init() it is a fork server: the socket's number.
inline constexpr const char* kForkServerEnv = "STOKER_FORK_SERVER_SOCKET";

}  // namespace stoker::detail
