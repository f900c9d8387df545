// One object over HTTP(S) through libcurl: what it is (its size and ETag) and its bytes into a
// file, surviving what servers and networks do. A transfer broken off (a reset, a stall, a
// timeout) is resumed from the bytes already written with a Range request; 5xx, 408 and 429 answers
// (S3's SlowDown is a 503) are retried after a backoff with jitter, doubling up to a ceiling, until
// FetchPolicy::timeout has passed without progress: then the error names the URL, the tries and the
// last answer. Every answer is checked against what the object was when it was listed: a size or
// ETag that differs is an error (never bytes of two versions in one file). Thread-safe: each call
// has its own connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace stoker::remote {

struct FetchPolicy {
  // How long an object may go without progress (no answer, or no byte) before its fetch fails: a
  // transfer that moved forward and then broke starts this budget again.
  std::chrono::milliseconds timeout{std::chrono::minutes(2)};
  std::chrono::milliseconds first_backoff{200};
  std::chrono::milliseconds max_backoff{std::chrono::seconds(10)};
  // A transfer below `stall_bytes_per_s` for `stall_seconds` is broken off and resumed.
  long stall_bytes_per_s = 1024;
  long stall_seconds = 20;
  long connect_timeout_s = 15;
  // Set by another thread: transfers and pauses stop, and the call throws ErrorCode::interrupted.
  const std::atomic<bool>* stop = nullptr;
};

// What fetches did, added up by every thread that fetches.
struct FetchCounters {
  std::atomic<std::uint64_t> downloads{0};    // objects fetched whole
  std::atomic<std::uint64_t> bytes{0};        // bytes received into files
  std::atomic<std::uint64_t> retries{0};      // requests made again (a retried answer, a resumed transfer)
  std::atomic<std::uint64_t> cache_hits{0};   // objects found complete in the cache
  std::atomic<std::uint64_t> nanoseconds{0};  // spent in cache_objects (listing, stats and fetches)
  std::atomic<std::uint64_t> evictions{0};    // cached objects let go of to make room for others

  // Adds what `other` counted (a fetch counted apart, to tell what it did itself).
  void add(const FetchCounters& other) noexcept {
    downloads += other.downloads;
    bytes += other.bytes;
    retries += other.retries;
    cache_hits += other.cache_hits;
    nanoseconds += other.nanoseconds;
    evictions += other.evictions;
  }
};

// Adds the time from its making to its end to FetchCounters::nanoseconds, however the fetching
// between ends (an error, a stop).
class FetchTime {
 public:
  explicit FetchTime(FetchCounters& counters) noexcept
      : counters_(counters), started_(std::chrono::steady_clock::now()) {}
  ~FetchTime() {
    counters_.nanoseconds += static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started_).count());
  }
  FetchTime(const FetchTime&) = delete;
  FetchTime& operator=(const FetchTime&) = delete;

 private:
  FetchCounters& counters_;
  std::chrono::steady_clock::time_point started_;
};

// An object as its server describes it.
struct ObjectInfo {
  std::uint64_t size = 0;
  std::string etag;  // normalized_etag() of what was sent; "" when the server sends none
  bool operator==(const ObjectInfo&) const = default;
};

// How requests to a store are signed: S3's SigV4 (libcurl's CURLOPT_AWS_SIGV4) with a key pair and,
// for temporary credentials, a session token. Empty: requests go unsigned.
struct Signing {
  std::string aws_sigv4;       // "aws:amz:REGION:s3"
  std::string user_password;   // "ACCESS_KEY:SECRET_KEY"
  std::string session_token;   // sent as x-amz-security-token
  std::string content_sha256;  // sent as x-amz-content-sha256, which S3 wants signed
};

// One object of a store: its URL, how to sign requests for it, and how messages name it.
struct RemoteObject {
  std::string url;
  std::string name;  // "s3://bucket/key", or the URL without its password
  Signing signing;
};

// An ETag as stoker compares them: without W/ and quotes, which stores write differently in a
// listing and in an answer's header.
std::string normalized_etag(std::string_view etag);

// What the object is now: a GET of its first byte (answered by servers that refuse HEAD), retried as
// a fetch is. Throws stoker::Error: ErrorCode::dataset for an answer that says it is not there (404,
// 403, ...), ErrorCode::io when no answer came within the policy's timeout.
ObjectInfo stat_object(const RemoteObject& object, const FetchPolicy& policy, FetchCounters& counters);

// Appends the object's bytes to the file `partial` until it holds all `expected.size` of them (a
// file that holds a prefix, from a transfer broken off before, is resumed), and returns the
// ContentDigest of the whole file (a resumed prefix read back). The blocks of the bytes still to
// come are reserved first (where the filesystem can), and those past the file's end given back
// when the fetch fails or is stopped. The file is not synced: the caller says when it must be
// (remote/cache_record.h). Throws stoker::Error: ErrorCode::dataset when the object's size or ETag
// is no longer `expected`, or it is gone; ErrorCode::io for a reservation or write that fails (a
// full disk: how many bytes were still to come) or when the server does not deliver within the
// policy's timeout.
std::uint64_t fetch_object(const RemoteObject& object, const ObjectInfo& expected, const std::string& partial,
                           const FetchPolicy& policy, FetchCounters& counters);

// The whole body of a small answer (a listing), at most `limit` bytes, retried as a fetch is.
std::string fetch_text(const RemoteObject& object, const FetchPolicy& policy, FetchCounters& counters,
                       std::size_t limit = 64u << 20);

}  // namespace stoker::remote
