// The fork server started by exec of the program (stoker::init, stoker/init.h): it receives the
// loader's setup over its socket (loader/workers/setup_channel.h), checks it, maps the ring, and
// serves the workers (loader/workers/server_loop.h).
#pragma once

namespace stoker::detail {

// In a process exec'd as a fork server: everything that can fail is checked before serving and
// reported to the loader (fail_setup); never returns.
[[noreturn]] void serve_exec_fork_server(int sock);

}  // namespace stoker::detail
