// The fork server started by exec of the program (stoker::init, stoker/init.h): it receives the
// loader's setup over its socket (loader/processes/setup_channel.h), checks it, maps the ring, and
// serves the workers (loader/processes/server_loop.h).
#pragma once

#include <functional>

#include "stoker/transform.h"

namespace stoker::detail {

// In a process exec'd as a fork server: everything that can fail is checked before serving and
// reported to the loader (fail_setup); never returns. A transform host (serve_transform_host)
// passes its factory, which rebuilds the setup's transform before any worker is forked, what its
// interpreter does around each fork, and what answers the questions a StartedHost is asked before
// its setup; a plain fork server refuses a setup with a transform, and questions.
[[noreturn]] void serve_exec_fork_server(int sock, const TransformFactory* factory = nullptr,
                                         const ForkHooks* hooks = nullptr, const TransformAnswer* answer = nullptr);

}  // namespace stoker::detail
