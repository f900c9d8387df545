// StartedHost's internals for the fork server that takes it over (stoker/transform.h).
#pragma once

#include "loader/processes/fork_server.h"
#include "stoker/transform.h"

namespace stoker::detail {

struct StartedHostAccess {
  // The host's process and socket, which the caller now owns (a ForkServer sends them the setup):
  // pid -1 when it was discarded or taken before, or it is discarded now: a question of it is
  // unanswered, or this is a fork of the process that started it. One that ended meanwhile is
  // taken, and its closed socket says so to the ForkServer.
  static LaunchedServer take(StartedHost& host) noexcept;
};

}  // namespace stoker::detail
