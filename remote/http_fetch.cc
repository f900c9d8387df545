#include "remote/http_fetch.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "base/unique_fd.h"
#include "remote/content_digest.h"
#include "remote/partial_file.h"
#include "remote/remote_url.h"
#include "stoker/error.h"

namespace stoker::remote {
namespace {

using Clock = std::chrono::steady_clock;

void curl_init_once() {
  // Not thread-safe itself: run once, before any handle, by the first fetch.
  static const CURLcode initialised = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (initialised != CURLE_OK)
    throw Error(ErrorCode::io, fmt::format("libcurl could not start: {}", curl_easy_strerror(initialised)));
}

struct EasyDeleter {
  void operator()(CURL* c) const noexcept { curl_easy_cleanup(c); }
};

// What the last response of a request said (a redirect's are replaced by the next one's).
struct Answer {
  long status = 0;
  std::string etag;
  std::optional<std::uint64_t> range_first, total;  // Content-Range: bytes FIRST-LAST/TOTAL, or */TOTAL
  std::optional<std::uint64_t> length;              // Content-Length
  std::string body_head;                            // the start of an error's body (S3 says <Code> there)
};

// One request in flight: where its bytes go and what they must be.
struct Transfer {
  CURL* easy = nullptr;
  const RemoteObject* object = nullptr;
  const ObjectInfo* expected = nullptr;  // null: a stat, which keeps no byte, or a text
  std::string* text = nullptr;           // a text's body goes here, up to text_limit bytes
  std::size_t text_limit = 0;
  int fd = -1;
  ContentDigest* digest = nullptr;  // of the file's bytes so far, when it is written to `fd`
  std::uint64_t asked_from = 0;     // the Range asked for
  std::uint64_t offset = 0;         // where the next byte goes in the file
  // The body's bytes not yet in the file, up to kPartialWriteBytes (remote/partial_file.h): they
  // end at `offset`.
  std::vector<char> unwritten;
  bool checked = false;  // this response's headers were checked against `expected`
  Answer answer;
  std::optional<Error> failed;  // a check or write that failed: not retried
  FetchCounters* counters = nullptr;
};

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

bool header_is(std::string_view line, std::string_view name) {
  if (line.size() <= name.size() || line[name.size()] != ':') return false;
  for (std::size_t i = 0; i < name.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != name[i]) return false;
  return true;
}

std::size_t on_header(char* data, std::size_t size, std::size_t count, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::string_view line(data, size * count);
  if (line.starts_with("HTTP/")) {
    t.answer = Answer{};  // a new response (after a redirect, or a 100 Continue)
    t.checked = false;
    return line.size();
  }
  if (header_is(line, "etag")) {
    t.answer.etag = normalized_etag(trimmed(line.substr(5)));
  } else if (header_is(line, "content-length")) {
    t.answer.length = decimal(trimmed(line.substr(15)));
  } else if (header_is(line, "content-range")) {
    std::string_view v = trimmed(line.substr(14));  // "bytes 0-0/1234" or "bytes */1234"
    if (v.starts_with("bytes ")) v.remove_prefix(6);
    const std::size_t slash = v.find('/'), dash = v.find('-');
    if (slash != std::string_view::npos) t.answer.total = decimal(v.substr(slash + 1));
    if (dash != std::string_view::npos && dash < slash) t.answer.range_first = decimal(v.substr(0, dash));
  }
  return line.size();
}

bool success(long status) { return status >= 200 && status < 300; }

// The response's headers against what the object was listed as; a 200 to a Range request starts
// the file over. False (with t.failed set) when they do not agree.
bool check_response(Transfer& t) {
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &t.answer.status);
  t.checked = true;
  if (!success(t.answer.status) || t.expected == nullptr) return true;
  const ObjectInfo& want = *t.expected;
  const std::string& url = t.object->name;
  if (!want.etag.empty() && !t.answer.etag.empty() && t.answer.etag != want.etag) {
    t.failed = Error(ErrorCode::dataset,
                     fmt::format("{}: changed since it was listed (ETag {} then, {} now): stoker never mixes two "
                                 "versions of a shard; build the loader again to read the new one",
                                 url, want.etag, t.answer.etag));
    return false;
  }
  const std::optional<std::uint64_t> size = t.answer.status == 206 ? t.answer.total : t.answer.length;
  if (size && *size != want.size) {
    t.failed = Error(ErrorCode::dataset,
                     fmt::format("{}: changed since it was listed ({} bytes then, {} now): stoker never mixes two "
                                 "versions of a shard; build the loader again to read the new one",
                                 url, want.size, *size));
    return false;
  }
  if (t.answer.status == 206 && t.answer.range_first != t.asked_from) {
    t.failed = Error(ErrorCode::dataset, fmt::format("{}: asked for bytes from {}, the server sent them from {}", url,
                                                     t.asked_from, t.answer.range_first.value_or(0)));
    return false;
  }
  if (t.answer.status != 206 && t.asked_from > 0) {  // the Range was ignored: the whole object comes
    if (::ftruncate(t.fd, 0) != 0) {
      t.failed = Error::from_errno(errno, "truncating the partial download of " + url);
      return false;
    }
    t.offset = 0;
    t.unwritten.clear();  // empty: a response is checked at its first body byte
    t.digest->restart();
    if (const int e = reserve_blocks(t.fd, 0, want.size)) {  // the truncation gave the blocks back
      t.failed = Error(ErrorCode::io, write_error(url, e, 0, want.size));
      return false;
    }
  }
  return true;
}

// Writes `n` bytes ending at the file's `end`. False (with t.failed set) when the write fails.
bool write_at(Transfer& t, const char* data, std::size_t n, std::uint64_t end) {
  std::uint64_t written = 0;
  if (const int e = write_all(t.fd, data, n, end - n, written)) {
    t.failed = Error(ErrorCode::io, write_error(t.object->name, e, end - n + written, t.expected->size));
    return false;
  }
  return true;
}

// The body's bytes held back, written: after each request, whatever its end, so that the file
// holds every byte that came (a resume asks for the rest). False (with t.failed set) when the write
// fails.
bool write_unwritten(Transfer& t) {
  if (t.unwritten.empty() || t.failed) return !t.failed;
  const bool written = write_at(t, t.unwritten.data(), t.unwritten.size(), t.offset);
  t.unwritten.clear();
  return written;
}

std::size_t on_body(char* data, std::size_t size, std::size_t count, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::size_t n = size * count;
  if (!t.checked && !check_response(t)) return 0;
  if (!success(t.answer.status)) {  // an error's body: its start says why (S3's <Code>SlowDown</Code>)
    t.answer.body_head.append(data,
                              std::min<std::size_t>(n, 1024 - std::min<std::size_t>(1024, t.answer.body_head.size())));
    return n;
  }
  if (t.text != nullptr) {
    if (t.text->size() + n > t.text_limit) {
      t.failed = Error(ErrorCode::dataset,
                       fmt::format("{}: the answer is longer than {} bytes", t.object->name, t.text_limit));
      return 0;
    }
    t.text->append(data, n);
    return n;
  }
  if (t.expected == nullptr) return 0;  // a stat: the headers were all it wanted
  if (t.offset + n > t.expected->size) {
    t.failed = Error(ErrorCode::dataset, fmt::format("{}: sent more than the {} bytes it was listed with",
                                                     t.object->name, t.expected->size));
    return 0;
  }
  if (t.unwritten.empty() && n >= kPartialWriteBytes) {
    if (!write_at(t, data, n, t.offset + n)) return 0;
  } else {
    if (t.unwritten.capacity() < kPartialWriteBytes) t.unwritten.reserve(kPartialWriteBytes + CURL_MAX_WRITE_SIZE);
    t.unwritten.insert(t.unwritten.end(), data, data + n);
    if (t.unwritten.size() >= kPartialWriteBytes) {
      const bool written = write_at(t, t.unwritten.data(), t.unwritten.size(), t.offset + n);
      t.unwritten.clear();
      if (!written) return 0;
    }
  }
  t.digest->add(data, n);
  t.offset += n;
  t.counters->bytes += n;
  return n;
}

// The answer in words for a message: "HTTP 503 (SlowDown)", "HTTP 404".
std::string answer_text(const Answer& a) {
  std::string text = fmt::format("HTTP {}", a.status);
  const std::size_t code = a.body_head.find("<Code>"), end = a.body_head.find("</Code>");
  if (code != std::string::npos && end != std::string::npos && end > code)
    text += fmt::format(" ({})", a.body_head.substr(code + 6, end - code - 6));
  return text;
}

bool retried_status(long status) { return status == 408 || status == 429 || status >= 500; }

bool retried_transport(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return true;
    default: return false;
  }
}

// A request's end: done, or to be tried again (after it moved the transfer forward, or not).
enum class Outcome { done, retry, retry_after_progress };

// libcurl's progress callback: a nonzero answer aborts the transfer (FetchPolicy::stop).
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* stop = static_cast<const std::atomic<bool>*>(user);
  return stop != nullptr && stop->load() ? 1 : 0;
}

[[noreturn]] void interrupted(const RemoteObject& object) {
  throw Error(ErrorCode::interrupted, fmt::format("{}: its fetch was stopped", object.name));
}

struct SlistDeleter {
  void operator()(curl_slist* l) const noexcept { curl_slist_free_all(l); }
};

// The request's options: where, how signed, what Range, and where its answer goes.
void set_request(CURL* c, const Transfer& t, const FetchPolicy& policy, const std::string& range, char* error,
                 curl_slist* headers) {
  curl_easy_setopt(c, CURLOPT_URL, t.object->url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_USERAGENT, "stoker");
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, policy.stop);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, policy.connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, policy.stall_bytes_per_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, policy.stall_seconds);
  if (!range.empty()) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  const Signing& sign = t.object->signing;
  if (!sign.aws_sigv4.empty()) {
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sign.aws_sigv4.c_str());
    curl_easy_setopt(c, CURLOPT_USERPWD, sign.user_password.c_str());
  }
  if (headers != nullptr) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  // A body into a file is received up to 1 MiB at a time, not libcurl's 16 KiB (and handed to
  // on_body in pieces of 16 KiB at most, which Transfer::unwritten joins).
  if (t.fd >= 0) curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 1L << 20);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
}

// One request from `t.asked_from`: done, to be retried (`last` says why), or an Error thrown.
Outcome request(Transfer& t, const FetchPolicy& policy, std::string& last) {
  std::unique_ptr<CURL, EasyDeleter> easy(curl_easy_init());
  if (!easy) throw Error(ErrorCode::io, "libcurl could not make a connection handle (out of memory?)");
  CURL* c = easy.get();
  t.easy = c;
  char error[CURL_ERROR_SIZE] = {};
  // A stat asks for the first byte; a fetch from where its file ends; a text for everything.
  const bool stat = t.expected == nullptr && t.text == nullptr;
  const std::string range = stat ? "0-0" : t.expected && t.asked_from > 0 ? fmt::format("{}-", t.asked_from) : "";
  // x-amz-* headers are signed with the request (libcurl signs those it is given).
  std::unique_ptr<curl_slist, SlistDeleter> headers;
  const auto add = [&](const std::string& name, const std::string& value) {
    if (value.empty()) return;
    curl_slist* more = curl_slist_append(headers.get(), (name + ": " + value).c_str());
    if (!more) throw Error(ErrorCode::io, "libcurl could not add a request header (out of memory?)");
    (void)headers.release();
    headers.reset(more);
  };
  add("x-amz-content-sha256", t.object->signing.content_sha256);
  add("x-amz-security-token", t.object->signing.session_token);
  set_request(c, t, policy, range, error, headers.get());
  const CURLcode result = curl_easy_perform(c);
  if (t.fd >= 0) write_unwritten(t);
  if (result == CURLE_ABORTED_BY_CALLBACK) interrupted(*t.object);
  if (t.failed) throw *t.failed;
  if (!t.checked) check_response(t);  // an answer without a body
  if (t.failed) throw *t.failed;
  const std::string& name = t.object->name;
  if (result != CURLE_OK && !(result == CURLE_WRITE_ERROR && stat)) {
    last = fmt::format("{} ({})", error[0] ? error : curl_easy_strerror(result), curl_easy_strerror(result));
    if (retried_transport(result)) return Outcome::retry;
    throw Error(ErrorCode::io, fmt::format("{}: {}", name, last));
  }
  if (success(t.answer.status) || (stat && t.answer.status == 416)) {
    if (t.expected && t.offset < t.expected->size) {  // the body ended early without an error
      last = fmt::format("{} ended after {} of {} bytes", answer_text(t.answer), t.offset, t.expected->size);
      return Outcome::retry;
    }
    return Outcome::done;
  }
  last = answer_text(t.answer);
  if (retried_status(t.answer.status)) return Outcome::retry;
  std::string hint;
  if (t.answer.status == 403 && t.object->signing.aws_sigv4.empty() && name.starts_with("s3://")) {
    hint =
        "; the request went unsigned, for no AWS credentials were found (AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or the profile's keys in ~/.aws/credentials): with SSO or a role, export them "
        "first (eval \"$(aws configure export-credentials --format env)\")";
  }
  throw Error(ErrorCode::dataset, fmt::format("{}: the server answered {}{}", name, last, hint));
}

// Runs `attempt` until it is done, sleeping a backoff with jitter between tries, for at most the
// policy's timeout in all.
template <class Attempt>
void with_retries(const RemoteObject& object, const FetchPolicy& policy, FetchCounters& counters, Attempt attempt) {
  curl_init_once();
  thread_local std::mt19937_64 rng{std::random_device{}()};
  Clock::time_point deadline = Clock::now() + policy.timeout;
  std::chrono::milliseconds backoff = policy.first_backoff;
  std::string last;
  for (int tries = 1;; ++tries) {
    const Outcome outcome = attempt(last);
    if (outcome == Outcome::done) return;
    if (outcome == Outcome::retry_after_progress) {  // it moved: the budget counts from here
      deadline = Clock::now() + policy.timeout;
      backoff = policy.first_backoff;
    }
    // Full jitter over the upper half: ranks that failed together do not retry together.
    std::uniform_int_distribution<long> jitter(backoff.count() / 2, backoff.count());
    const std::chrono::milliseconds pause(jitter(rng));
    if (Clock::now() + pause > deadline) {
      throw Error(ErrorCode::io,
                  fmt::format("{}: no complete answer within the fetch timeout of {:g} s ({} tries); the last: {}",
                              object.name, static_cast<double>(policy.timeout.count()) / 1000, tries, last));
    }
    ++counters.retries;
    for (const Clock::time_point until = Clock::now() + pause; Clock::now() < until;) {
      if (policy.stop && policy.stop->load()) interrupted(object);
      std::this_thread::sleep_for(std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(50)));
    }
    backoff = std::min(policy.max_backoff, backoff * 2);
  }
}

// fetch_object's requests: from `offset` (moved on as bytes come) to the object's end.
void fetch_rest(const RemoteObject& object, const ObjectInfo& expected, int fd, ContentDigest& digest,
                std::uint64_t& offset, const FetchPolicy& policy, FetchCounters& counters) {
  with_retries(object, policy, counters, [&](std::string& last) {
    if (offset == expected.size) return Outcome::done;
    Transfer t;
    t.object = &object;
    t.expected = &expected;
    t.fd = fd;
    t.digest = &digest;
    t.asked_from = t.offset = offset;
    t.counters = &counters;
    const Outcome o = request(t, policy, last);
    const bool moved = t.offset > offset;
    offset = t.offset;
    return o == Outcome::retry && moved ? Outcome::retry_after_progress : o;
  });
}

}  // namespace

std::string normalized_etag(std::string_view etag) {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return std::string(etag);
}

ObjectInfo stat_object(const RemoteObject& object, const FetchPolicy& policy, FetchCounters& counters) {
  ObjectInfo info;
  with_retries(object, policy, counters, [&](std::string& last) {
    Transfer t;
    t.object = &object;
    t.counters = &counters;
    const Outcome o = request(t, policy, last);
    if (o == Outcome::done) {
      // 416 to a request for the first byte: the object is empty (Content-Range "bytes */0").
      const std::optional<std::uint64_t> size = t.answer.status == 416   ? t.answer.total.value_or(0)
                                                : t.answer.status == 206 ? t.answer.total
                                                                         : t.answer.length;
      if (!size) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: the server says nothing of its size (no Content-Range or Content-Length to a "
                                "request for its first byte)",
                                object.name));
      }
      info = ObjectInfo{*size, t.answer.etag};
    }
    return o;
  });
  return info;
}

std::uint64_t fetch_object(const RemoteObject& object, const ObjectInfo& expected, const std::string& partial,
                           const FetchPolicy& policy, FetchCounters& counters) {
  detail::UniqueFd fd(::open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd) throw Error::from_errno(errno, partial);
  const off_t held = ::lseek(fd.get(), 0, SEEK_END);
  if (held < 0) throw Error::from_errno(errno, partial);
  std::uint64_t offset = static_cast<std::uint64_t>(held);
  if (offset > expected.size) {  // not a prefix of this object: start over
    if (::ftruncate(fd.get(), 0) != 0) throw Error::from_errno(errno, partial);
    offset = 0;
  }
  ContentDigest digest;
  digest.add_file(fd.get(), offset, partial);  // a prefix left by a transfer broken off before
  if (const int e = reserve_blocks(fd.get(), offset, expected.size))
    throw Error(ErrorCode::io, write_error(object.name, e, offset, expected.size));
  try {
    fetch_rest(object, expected, fd.get(), digest, offset, policy, counters);
  } catch (...) {
    // The bytes that came stay, for a resume; the blocks reserved past them are given back.
    struct stat st {};
    if (::fstat(fd.get(), &st) == 0) release_reserved(fd.get(), static_cast<std::uint64_t>(st.st_size));
    throw;
  }
  ++counters.downloads;
  return digest.value();
}

std::string fetch_text(const RemoteObject& object, const FetchPolicy& policy, FetchCounters& counters,
                       std::size_t limit) {
  std::string text;
  with_retries(object, policy, counters, [&](std::string& last) {
    text.clear();
    Transfer t;
    t.object = &object;
    t.text = &text;
    t.text_limit = limit;
    t.counters = &counters;
    return request(t, policy, last);
  });
  return text;
}

}  // namespace stoker::remote
