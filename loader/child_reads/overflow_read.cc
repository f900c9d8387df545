#include "loader/child_reads/overflow_read.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <new>
#include <vector>

#include "base/deadline.h"
#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "base/unique_fd.h"
#include "loader/children/child_exit.h"
#include "loader/children/child_process.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

// The answer, in native 8-byte words: a status word, 1 for a result, 2 + 256 * code for an error.
// An error: a word of its text's length, then the text. A result: for each field of the delivered
// schema, a word counting its offsets (num_samples + 1 for a bytes field; 0 for a fixed one, which
// the child wrote into the slot) and a word of its data bytes; then each bytes field's offsets, in
// field order; then each bytes field's data, back to back. The sizes come first so that the
// consumer can refuse a batch, or take memory of exactly its size, before the data arrives.
constexpr std::uint64_t kResult = 1, kFailed = 2;
// An error's text is a line or a few (a slot holds 4096 bytes of one): more is not an answer.
constexpr std::uint64_t kMaxErrorText = 64 << 10;

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

// In the child: reads, sends, exits. Never returns.
[[noreturn]] void read_and_send(int sock, BatchFiller& filler, const SegmentView& view, std::uint32_t s,
                                const Schema& delivered) noexcept {
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
    failure.resize(std::min<std::size_t>(failure.size(), kMaxErrorText));
    sent = send_word(sock, kFailed + 256 * static_cast<std::uint64_t>(code)) && send_word(sock, failure.size()) &&
           send_all(sock, failure.data(), failure.size());
  } else {
    // A bytes field of the delivered schema is one the filler read into `fields` (a field with a
    // pipeline is a fixed one: its output is in the slot).
    const auto sent_here = [&](std::size_t f) { return delivered.fields[f].is_bytes() && f < fields.size(); };
    sent = send_word(sock, kResult);
    for (std::size_t f = 0; sent && f < delivered.fields.size(); ++f) {
      sent = send_word(sock, sent_here(f) ? fields[f].offsets().size() : 0) &&
             send_word(sock, sent_here(f) ? fields[f].total() : 0);
    }
    for (std::size_t f = 0; sent && f < delivered.fields.size(); ++f) {
      if (sent_here(f)) sent = send_all(sock, fields[f].offsets().data(), fields[f].offsets().size_bytes());
    }
    for (std::size_t f = 0; sent && f < delivered.fields.size(); ++f) {
      if (sent_here(f)) sent = send_all(sock, fields[f].data(), fields[f].total());
    }
  }
  ::_exit(sent ? 0 : 1);
}

struct AnswerEnded {};  // the child closed the socket before its answer was whole
struct AnswerLate {};   // the deadline passed first

// Reads the child's answer, exactly as many bytes as asked, never more, before the deadline.
class AnswerReader {
 public:
  AnswerReader(int fd, Clock::time_point deadline) : fd_(fd), deadline_(deadline) {}

  // Exactly n bytes into p. Throws AnswerEnded or AnswerLate.
  void read(void* p, std::size_t n) {
    char* at = static_cast<char*>(p);
    while (n > 0) {
      const std::size_t got = read_some(at, n);
      if (got == 0) throw AnswerEnded{};
      at += got;
      n -= got;
    }
  }
  std::uint64_t word() {
    std::uint64_t w = 0;
    read(&w, sizeof w);
    return w;
  }
  // Whether the child closed the socket with nothing more sent (it then exits). Throws AnswerLate.
  bool at_end() {
    char c;
    return read_some(&c, 1) == 0;
  }

 private:
  std::size_t read_some(char* p, std::size_t n) {
    for (;;) {
      pollfd fd{fd_, POLLIN, 0};
      const int r = poll_until(&fd, 1, deadline_);
      if (r < 0) throw_errno("poll for the batch a child process reads");
      if (r == 0) throw AnswerLate{};
      const ssize_t got = ::read(fd_, p, n);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw_errno("reading the batch a child process read");
      return static_cast<std::size_t>(got);
    }
  }

  int fd_;
  Clock::time_point deadline_;
};

// The bytes fields the child read, in memory of this process: every offset in one array, the data
// in one buffer of exactly its size, filled by the read from the socket (never zeroed first).
struct ReceivedBytes {
  std::vector<std::uint64_t> offsets;
  std::unique_ptr<std::byte[]> data;
};

// Reads the child's answer: its bytes fields, each checked and counted against `bound` before any
// memory is taken for the data. Throws the child's error, the refusal, or a malformed answer
// (ErrorCode::internal); AnswerEnded or AnswerLate when it is cut short.
Error malformed_answer(const std::string& what, const std::string& why) {
  return Error(ErrorCode::internal, fmt::format("{}: the process that read it answered malformed: {}", what, why));
}

// `indices`: the batch's, as the consumer wrote them.
OutsideBytes receive_answer(AnswerReader& in, std::span<const std::uint64_t> indices, const Schema& delivered,
                            const OverflowBound& bound, const std::string& what) {
  const auto malformed = [&](const std::string& why) { return malformed_answer(what, why); };
  const std::uint64_t status = in.word();
  if (status % 256 == kFailed) {
    const std::uint64_t code = status / 256;
    const std::uint64_t n = in.word();
    if (n > kMaxErrorText) throw malformed(fmt::format("an error of {} bytes", n));
    std::string text(n, '\0');
    in.read(text.data(), n);
    if (!in.at_end()) throw malformed("bytes after its error");
    throw Error(error_code_from_wire(code), fmt::format("{}: {}", what, text));
  }
  if (status != kResult) throw malformed(fmt::format("status {}", status));

  const std::size_t nf = delivered.fields.size();
  const std::uint64_t num_samples = indices.size();
  std::vector<std::uint64_t> sizes(2 * nf);  // per field: its offsets, its data bytes
  in.read(sizes.data(), sizes.size() * sizeof(std::uint64_t));
  std::uint64_t num_offsets = 0, data_bytes = 0;
  for (std::size_t f = 0; f < nf; ++f) {
    const Field& field = delivered.fields[f];
    const std::uint64_t count = sizes[2 * f], bytes = sizes[2 * f + 1];
    if (field.is_bytes() && count != num_samples + 1) {
      throw malformed(
          fmt::format("bytes field {} ('{}') has {} offsets for a batch of {}", f, field.name, count, num_samples));
    }
    if (!field.is_bytes() && (count != 0 || bytes != 0)) {
      throw malformed(fmt::format("fixed field {} ('{}'), which is in the slot, came with {} offsets and {} bytes", f,
                                  field.name, count, bytes));
    }
    num_offsets += count;
    if (__builtin_add_overflow(data_bytes, bytes, &data_bytes)) throw malformed("its fields' sizes overflow");
  }

  auto received = std::make_shared<ReceivedBytes>();
  received->offsets.resize(num_offsets);  // (batch_size + 1) per bytes field, as the slot holds
  in.read(received->offsets.data(), num_offsets * sizeof(std::uint64_t));
  OutsideBytes out;
  out.fields.resize(nf);
  std::uint64_t at = 0;
  for (std::size_t f = 0; f < nf; ++f) {
    if (!delivered.fields[f].is_bytes()) continue;
    const std::span<const std::uint64_t> o(received->offsets.data() + at, num_samples + 1);
    at += o.size();
    if (o.front() != 0 || o.back() != sizes[2 * f + 1] || !std::is_sorted(o.begin(), o.end())) {
      throw malformed(
          fmt::format("field {}'s offsets do not start at 0, rise and end at its {} bytes", f, sizes[2 * f + 1]));
    }
    out.fields[f].offsets = o;
  }
  check_overflow_bound(out.fields, delivered, indices, bound, what);

  // Each field at an address aligned for any dtype (a field of i32 values after one of odd bytes).
  constexpr std::uint64_t kAlign = alignof(std::max_align_t);
  std::uint64_t padded = 0;
  for (std::size_t f = 0; f < nf; ++f) {
    if (delivered.fields[f].is_bytes()) padded += (out.fields[f].offsets.back() + kAlign - 1) / kAlign * kAlign;
  }
  try {
    received->data = std::make_unique_for_overwrite<std::byte[]>(std::max<std::uint64_t>(padded, 1));
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::io, fmt::format("{}: no memory for its {} of bytes fields", what, format_bytes(data_bytes)));
  }
  std::uint64_t offset = 0;
  for (std::size_t f = 0; f < nf; ++f) {
    if (!delivered.fields[f].is_bytes()) continue;
    const std::uint64_t n = out.fields[f].offsets.back();
    out.fields[f].data = received->data.get() + offset;
    in.read(received->data.get() + offset, n);
    offset += (n + kAlign - 1) / kAlign * kAlign;
  }
  if (!in.at_end()) throw malformed("bytes after the last field");
  out.owner = std::move(received);
  return out;
}

}  // namespace

OverflowBound overflow_bound(std::uint64_t file_bytes, std::uint32_t local_ranks, const ShmEnvironment& env) {
  OverflowBound b;
  const std::uint64_t available = std::min(mem_available(env), cgroup_memory_headroom(env));
  if (available != UINT64_MAX) {
    const std::uint64_t ranks = std::max<std::uint32_t>(local_ranks, 1);
    b.bytes = available / 2 / ranks;
    b.what = fmt::format(
        "half of the {} of memory this process may still take (MemAvailable, the memory cgroup's "
        "headroom){}",
        format_bytes(available), ranks > 1 ? fmt::format(", shared among the {} ranks on this node", ranks) : "");
    b.advice = fmt::format(
        "the training process does not take that much for one batch; give it more memory (free some, or raise the "
        "container's memory limit) or use a smaller {}",
        option_name("batch_size"));
  }
  if (file_bytes > 0 && file_bytes < b.bytes) {
    b.bytes = file_bytes;
    b.what = fmt::format("the dataset's size on disk, {}", format_bytes(file_bytes));
    b.advice = fmt::format(
        "no batch of distinct samples, stored as they are delivered, holds more, so the file claims samples larger "
        "than it holds: it is damaged or crafted, or stores them compressed (the members of a sample group); check "
        "the file, or store those samples uncompressed, or use a smaller {}",
        option_name("batch_size"));
  }
  return b;
}

void check_overflow_bound(std::span<const OutsideBytes::Field> fields, const Schema& delivered,
                          std::span<const std::uint64_t> indices, const OverflowBound& bound, const std::string& what) {
  std::uint64_t total = 0;
  for (std::size_t f = 0; f < delivered.fields.size(); ++f) {
    if (!delivered.fields[f].is_bytes() || fields[f].offsets.empty()) continue;
    if (__builtin_add_overflow(total, fields[f].offsets.back(), &total)) total = UINT64_MAX;
  }
  if (total <= bound.bytes) return;
  std::vector<std::string> parts;
  for (std::size_t f = 0; f < delivered.fields.size(); ++f) {
    const std::span<const std::uint64_t> o = fields[f].offsets;
    if (!delivered.fields[f].is_bytes() || o.size() < 2) continue;
    std::size_t largest = 0;
    for (std::size_t k = 1; k + 1 < o.size(); ++k) {
      if (o[k + 1] - o[k] > o[largest + 1] - o[largest]) largest = k;
    }
    parts.push_back(fmt::format("'{}' {}, its largest sample {} of {}", delivered.fields[f].name,
                                format_bytes(o.back()), largest < indices.size() ? indices[largest] : largest,
                                format_bytes(o[largest + 1] - o[largest])));
  }
  throw Error(ErrorCode::dataset,
              fmt::format("{}: its bytes fields hold {} ({}), more than a batch read again may take: {}: {} "
                          "(docs/shm-layout.md)",
                          what, format_bytes(total), fmt::join(parts, "; "), bound.what, bound.advice));
}

std::string check_slot_read_again(const SegmentView& view, std::uint32_t s, const SlotHeader& before,
                                  std::span<const std::uint64_t> indices) {
  const SlotHeader& h = view.slot_header(s);
  if (h.task_id != before.task_id || h.epoch != before.epoch || h.batch_index != before.batch_index ||
      h.num_samples != before.num_samples || h.status != before.status) {
    return fmt::format("it rewrote the slot's header (task {}, epoch {}, batch {} of {} samples, status {})", h.task_id,
                       h.epoch, h.batch_index, h.num_samples, h.status);
  }
  if (!std::equal(indices.begin(), indices.end(), view.slot_indices(s))) return "it rewrote the batch's sample indices";
  return view.check_skipped(s, before.num_samples);
}

std::string overflow_batch_name(const std::string& path, const SlotHeader& h) {
  return fmt::format("{}: batch {} of epoch {}, too large for its slot and read again", path, h.batch_index, h.epoch);
}

OutsideBytes read_overflow_in_child(BatchFiller& filler, const SegmentView& view, std::uint32_t s,
                                    const Schema& delivered, const OverflowBound& bound, const std::string& path,
                                    std::chrono::milliseconds timeout) {
  const std::string what = overflow_batch_name(path, view.slot_header(s));
  // The task as the consumer wrote it: the child may write anywhere in the slot.
  const SlotHeader before = view.slot_header(s);
  const std::vector<std::uint64_t> indices(view.slot_indices(s), view.slot_indices(s) + before.num_samples);
  ChildProcess child("the process that reads " + what, SOCK_STREAM, ChildProcess::Tie::to_this_thread,
                     [&](int sock) { read_and_send(sock, filler, view, s, delivered); });
  const auto died = [&] {
    return Error(ErrorCode::dataset,
                 fmt::format("{}: the process that read it {} (it ran in a process of its own: the training process "
                             "is unharmed): the file is damaged, or not one HDF5 or LMDB can read",
                             what, describe_wait_status(child.status())));
  };
  const auto failed = [&] { return !WIFEXITED(child.status()) || WEXITSTATUS(child.status()) != 0; };
  AnswerReader in(child.socket(), timeout.count() > 0 ? deadline_in(timeout) : Clock::time_point::max());
  OutsideBytes outside;
  try {
    outside = receive_answer(in, indices, delivered, bound, what);
  } catch (const AnswerLate&) {
    child.kill_and_wait();
    throw Error(ErrorCode::dataset, fmt::format("{}: the process that read it made no answer within {} ms and was "
                                                "killed (it ran in a process of its own: the training process is "
                                                "unharmed)",
                                                what, timeout.count()));
  } catch (const AnswerEnded&) {
    child.wait();
    if (failed()) throw died();
    throw Error(ErrorCode::internal,
                fmt::format("{}: the process that read it answered malformed: its answer was cut short", what));
  }
  child.wait();
  if (failed()) throw died();
  if (std::string why = check_slot_read_again(view, s, before, indices); !why.empty())
    throw malformed_answer(what, why);
  return outside;
}

OutsideBytes read_overflow_here(BatchFiller& filler, const SegmentView& view, std::uint32_t s, const Schema& delivered,
                                const OverflowBound& bound, const std::string& path) {
  const SlotHeader& h = view.slot_header(s);
  auto read = std::make_shared<std::vector<formats::VarBytes>>();
  filler.fill_overflow(view, s, *read);
  OutsideBytes outside;
  for (const formats::VarBytes& field : *read) outside.fields.push_back({field.data(), field.offsets()});
  check_overflow_bound(outside.fields, delivered, {view.slot_indices(s), h.num_samples}, bound,
                       overflow_batch_name(path, h));
  outside.owner = std::move(read);
  return outside;
}

}  // namespace stoker::detail
