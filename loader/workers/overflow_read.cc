#include "loader/workers/overflow_read.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <vector>

#include "loader/base/deadline.h"
#include "loader/base/posix_error.h"
#include "loader/base/unique_fd.h"
#include "loader/workers/fork_protocol.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

// The answer, in 8-byte words (so that offsets are aligned where they land): a status word, 1 for
// a result, 2 + 256 * code for an error; an error's text follows as a word of its length and the
// text; a result, per field of the schema, a word counting the offsets (0 for a field not read
// here), the offsets, a word counting the data bytes and the data, padded to a whole word.
constexpr std::uint64_t kResult = 1, kFailed = 2;

bool send_all(int fd, const void* data, std::size_t n) noexcept {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

bool send_word(int fd, std::uint64_t v) noexcept { return send_all(fd, &v, sizeof v); }

bool send_padded(int fd, const void* data, std::uint64_t n) noexcept {
  static constexpr char kPad[8] = {};
  return send_word(fd, n) && send_all(fd, data, n) && send_all(fd, kPad, (8 - n % 8) % 8);
}

// In the child: reads, sends, exits. Never returns.
[[noreturn]] void read_and_send(int sock, BatchFiller& filler, const SegmentView& view, std::uint32_t s) noexcept {
  std::vector<formats::VarBytes> fields;
  std::string failure;
  ErrorCode code = ErrorCode::dataset;
  try {
    filler.fill_overflow(view, s, fields);
  } catch (const Error& e) {
    code = e.code();
    failure = e.what();
  } catch (const std::bad_alloc&) {
    failure = "out of memory reading it";
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "a non-standard exception was thrown reading it";
  }
  bool sent = true;
  if (!failure.empty()) {
    sent = send_word(sock, kFailed + 256 * static_cast<std::uint64_t>(code)) &&
           send_padded(sock, failure.data(), failure.size());
  } else {
    sent = send_word(sock, kResult);
    for (std::size_t f = 0; sent && f < fields.size(); ++f) {
      const std::span<const std::uint64_t> offsets = fields[f].offsets();
      sent = send_word(sock, offsets.size()) && send_all(sock, offsets.data(), offsets.size_bytes()) &&
             send_padded(sock, fields[f].data(), offsets.empty() ? 0 : fields[f].total());
    }
  }
  ::_exit(sent ? 0 : 1);
}

// Everything the child sent, until it closed the socket, or nullopt when the deadline passed
// first. Grows as bytes arrive: nothing is reserved on the child's word.
std::optional<std::vector<std::uint64_t>> receive_all(int fd, Clock::time_point deadline, std::size_t& bytes) {
  std::vector<std::uint64_t> words;
  bytes = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = poll_until(&p, 1, deadline);
    if (r < 0) throw_errno("poll for the batch a child process reads");
    if (r == 0) return std::nullopt;
    if (words.size() * 8 - bytes < 65536) words.resize(std::max<std::size_t>(words.size() * 2, 16384));
    const ssize_t n = ::read(fd, reinterpret_cast<char*>(words.data()) + bytes, words.size() * 8 - bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_errno("reading the batch a child process read");
    if (n == 0) return words;
    bytes += static_cast<std::size_t>(n);
  }
}

// Reads the child's answer word by word, never past what arrived.
class AnswerCursor {
 public:
  AnswerCursor(const std::vector<std::uint64_t>& words, std::size_t bytes) : words_(words), end_(bytes / 8) {}
  std::optional<std::uint64_t> word() {
    if (at_ >= end_) return std::nullopt;
    return words_[at_++];
  }
  // `n` bytes (then the padding to a whole word), or nullptr when fewer arrived.
  const std::uint64_t* take(std::uint64_t n) {
    const std::uint64_t w = n / 8 + (n % 8 != 0);
    if (w > end_ - at_) return nullptr;
    const std::uint64_t* p = words_.data() + at_;
    at_ += w;
    return p;
  }
  bool at_end() const noexcept { return at_ == end_; }

 private:
  const std::vector<std::uint64_t>& words_;
  std::size_t end_;
  std::size_t at_ = 0;
};

// What `answer` says: the error the child met, or the bytes fields, each checked.
OutsideBytes parse_answer(std::shared_ptr<std::vector<std::uint64_t>> answer, std::size_t bytes, std::size_t num_fields,
                          std::uint64_t num_samples, const std::string& what) {
  const auto malformed = [&](const std::string& why) {
    return Error(ErrorCode::internal, fmt::format("{}: the process that read it answered malformed: {}", what, why));
  };
  AnswerCursor in(*answer, bytes);
  const std::optional<std::uint64_t> status = in.word();
  if (status && *status % 256 == kFailed) {
    const std::uint64_t code = *status / 256;
    const std::optional<std::uint64_t> n = in.word();
    const auto* text = n ? in.take(*n) : nullptr;
    if (!text) throw malformed("a truncated error");
    const bool known = code >= 1 && code <= static_cast<std::uint64_t>(ErrorCode::internal);
    throw Error(known ? static_cast<ErrorCode>(code) : ErrorCode::internal,
                fmt::format("{}: {}", what, std::string_view(reinterpret_cast<const char*>(text), *n)));
  }
  if (status != kResult) throw malformed("no status");
  OutsideBytes out;
  out.fields.resize(num_fields);
  for (std::size_t f = 0; f < num_fields; ++f) {
    const std::optional<std::uint64_t> count = in.word();
    if (!count) throw malformed(fmt::format("field {} is missing", f));
    if (*count != 0 && *count != num_samples + 1) {
      throw malformed(fmt::format("field {} has {} offsets for a batch of {}", f, *count, num_samples));
    }
    const std::uint64_t* offsets = in.take(*count * 8);
    const std::optional<std::uint64_t> data_bytes = offsets ? in.word() : std::nullopt;
    const std::uint64_t* data = data_bytes ? in.take(*data_bytes) : nullptr;
    if (!data) throw malformed(fmt::format("field {} is truncated", f));
    if (*count == 0) continue;
    const std::span<const std::uint64_t> o(offsets, *count);
    if (o.front() != 0 || o.back() != *data_bytes || !std::is_sorted(o.begin(), o.end())) {
      throw malformed(
          fmt::format("field {}'s offsets do not start at 0, rise and end at its {} bytes", f, *data_bytes));
    }
    out.fields[f] = {reinterpret_cast<const std::byte*>(data), o};
  }
  if (!in.at_end()) throw malformed("bytes after the last field");
  out.owner = std::move(answer);
  return out;
}

}  // namespace

OutsideBytes read_overflow_in_child(BatchFiller& filler, const SegmentView& view, std::uint32_t s,
                                    std::size_t num_fields, const std::string& path,
                                    std::chrono::milliseconds timeout) {
  const SlotHeader& h = view.slot_header(s);
  const std::string what =
      fmt::format("{}: batch {} of epoch {}, too large for its slot and read again", path, h.batch_index, h.epoch);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw_errno("socketpair for reading a batch");
  UniqueFd mine(sv[0]), theirs(sv[1]);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw_errno(what + ": fork of the process that reads it");
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(static_cast<int>(ChildExit::orphaned));
    mine.reset();
    read_and_send(theirs.get(), filler, view, s);
  }
  theirs.reset();
  struct Reap {  // the child is waited for on every way out, killed first when it has not ended
    pid_t pid;
    int status = 0;
    bool done = false;
    void wait() {
      while (!done && ::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      done = true;
    }
    ~Reap() {
      if (!done) {
        ::kill(pid, SIGKILL);
        wait();
      }
    }
  } reap{pid};
  std::size_t bytes = 0;
  auto words = receive_all(mine.get(), timeout.count() > 0 ? deadline_in(timeout) : Clock::time_point::max(), bytes);
  if (!words) {
    ::kill(pid, SIGKILL);
    reap.wait();
    throw Error(ErrorCode::dataset, fmt::format("{}: the process that read it made no answer within {} ms and was "
                                                "killed (it ran in a process of its own: the training process is "
                                                "unharmed)",
                                                what, timeout.count()));
  }
  reap.wait();
  if (!WIFEXITED(reap.status) || WEXITSTATUS(reap.status) != 0) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: the process that read it {} (it ran in a process of its own: the training process "
                            "is unharmed): the file is damaged, or not one HDF5 or LMDB can read",
                            what, describe_wait_status(reap.status)));
  }
  return parse_answer(std::make_shared<std::vector<std::uint64_t>>(std::move(*words)), bytes, num_fields, h.num_samples,
                      what);
}

}  // namespace stoker::detail
