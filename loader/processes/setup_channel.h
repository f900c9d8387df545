// How a loader hands its settings to a fork server started by exec (stoker::init): the setup text
// and the descriptors the workers need (the ring's memory, the lifeline, the eventfds), over the
// server's socket. Sent in pieces, so that neither the text (a schema of a thousand fields) nor the
// descriptors (SCM_RIGHTS carries at most 253 per message: one per worker, and more) have a limit
// of their own: a header with both sizes, the text in packets of at most 64 KiB, then the
// descriptors at most 250 per packet. A question and its answer (below) are framed the same way,
// under headers of their own.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/unique_fd.h"

namespace stoker::detail {

// Sends `text` and `fds` (which stay open here). Throws stoker::Error when the socket fails.
void send_setup(int sock, const std::string& text, const std::vector<int>& fds);

// In the exec'd fork server: what send_setup sent, the descriptors close-on-exec. Before it, a
// transform host started ahead of its loader (StartedHost, stoker/transform.h) may be sent
// questions (send_question): each is given to `answer`, whose text goes back as the answer
// (receive_answer); a server without `answer` refuses them. Throws stoker::Error for a socket error
// or a setup that does not follow the protocol.
struct ReceivedSetup {
  std::string text;
  std::vector<UniqueFd> fds;
};
ReceivedSetup receive_setup(int sock, const std::function<std::string(const std::string&)>& answer = {});

// The loader's end of a question to a host before its setup: sends `text`; and, once the socket
// is readable, the answer when what waits there is one (nullopt: a fork_protocol.h message, which
// the caller reads). Throw stoker::Error when the socket fails.
void send_question(int sock, const std::string& text);
std::optional<std::string> receive_answer(int sock);

// After a setup_failed message: the text fail_setup sends with it (waited for; "" when the socket
// closed first).
std::string failure_text(int sock);

// In the exec'd fork server, when the setup cannot be used: tells the loader why (and what kind of
// failure, `code`: a stoker::ErrorCode), and exits with ChildExit::setup_failed.
[[noreturn]] void fail_setup(int sock, int code, const std::string& why) noexcept;

}  // namespace stoker::detail
