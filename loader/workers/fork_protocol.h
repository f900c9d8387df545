// The protocol between a loader (its ForkServer, loader/workers/fork_server.h) and its fork server
// process (loader/workers/server_loop.h): fixed-size messages on a SOCK_SEQPACKET socket, and the
// exit statuses by which a fork server or a worker that cannot go on says why.
//
//   loader -> server   spawn (worker w: fork a replacement), shutdown (arg: grace in ms), kill
//                      (worker w, pid: SIGKILL it if it is still that process, not yet reaped)
//   server -> loader   spawned (w, pid), exited (w, pid, wait status), spawn_failed (w, errno; w =
//                      kServer: the exec of the server itself), setup_failed (then one packet: why),
//                      shutdown_done
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

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

// The exit statuses of a fork server or a worker that cannot go on. Each is reported to the loader
// before, where there is a way to (a message); the status itself says which case it was when there
// is not.
enum class ChildExit : int {
  orphaned = 74,      // a worker whose fork server died before it could arm PR_SET_PDEATHSIG
  worker_threw = 70,  // a worker's loop threw (a bug: workers report errors in their slots)
  no_signalfd = 71,   // the fork server could not make the signalfd it reaps workers with
  spawn_failed = 72,  // the fork server could not fork a worker (spawn_failed was sent)
  setup_failed = 73,  // an exec'd fork server could not use its setup (setup_failed was sent)
  ring_refused = 75,  // a worker found a shared-memory ring its layout does not describe (it said why on stderr)
  exec_failed = 127,  // the exec of the fork server failed (spawn_failed was sent)
};

// "was killed by signal SIGKILL", "exited with status 3", "exited with status 73 (the fork
// server could not use its setup)".
std::string describe_wait_status(int wait_status);

// The environment variable that tells stoker::init() it is a fork server: the socket's number.
inline constexpr const char* kForkServerEnv = "STOKER_FORK_SERVER_SOCKET";

}  // namespace stoker::detail
