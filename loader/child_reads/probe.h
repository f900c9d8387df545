// The probe: a loader's first reading of its dataset (the format, the schema, the bounds of bytes
// fields, a few samples, the key scan of an LMDB without a schema) done in a process of its own.
// Neither HDF5 nor LMDB is hardened against hostile files: a damaged or crafted file can crash or
// hang the process that opens it. With workers, that process is never the trainer: the probe runs
// in a child (forked like the fork server, or exec'd like it when the program called stoker::init
// or named a worker executable), and its death or silence becomes an error naming the file. A
// loader without workers reads the file itself (docs/faults.md says so).
//
// Silence is the want of progress, not of an answer: the probe sends a note at each step of its
// reading (the file opened, each shard of a set, every few keys of an LMDB scan, each sample read
// for the slot sizes; base/progress_note.h), and is killed when none comes for
// probe_stall_limit(timeout): 10 s, so that a loop in HDF5 is an error within seconds whatever the
// dataset's size, while a shard set of thousands of shards on a slow file system may take as long
// as it needs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "formats/core/reader.h"
#include "stoker/schema.h"

namespace stoker::detail {

// What the loader learns of a dataset before it sizes the ring and starts workers.
struct ProbeResult {
  Schema schema;       // the reader's: the selected fields, num_samples
  std::string layout;  // Reader::describe_layout()
  // Per field: a bytes field's bound (the largest sample when exact), and the largest of a few
  // samples spread over the dataset (what a typical batch needs); 0 for fixed fields.
  std::vector<formats::SampleBound> bounds;
  std::vector<std::uint64_t> typical;
  // Per field: "JPEG" or "PNG" when the first sample read of a bytes field is one (its signature),
  // else "": an encoded image delivered as bytes is worth a word about the pipeline that decodes it.
  std::vector<std::string> encoded;
  std::uint64_t locality_rows = 1;
  std::uint64_t file_bytes = 0;              // the dataset's size on disk: no batch holds more of it
  std::uint64_t version = 0;                 // Reader::version()
  std::vector<std::uint64_t> shard_samples;  // a shard set's samples per shard (else empty)
  // A shard set's shards as the probe read them (else empty): every later open of one is checked
  // against its identity here (formats/sharded_reader.h).
  std::vector<std::optional<formats::FileIdentity>> shard_identities;
  std::map<std::string, std::string> metadata;  // Reader::metadata()
  std::string metadata_error;                   // why it could not be read (then empty), or ""
};

// Reads `reader` (open on `path`) as the probe does.
ProbeResult describe_dataset(formats::Reader& reader, const std::string& path);

// The longest the probe may go without a note: kProbeStallLimit, or the loader's timeout
// (Options::timeout) when that is shorter; zero (a timeout of zero) is no limit.
inline constexpr std::chrono::milliseconds kProbeStallLimit{10'000};
std::chrono::milliseconds probe_stall_limit(std::chrono::milliseconds timeout) noexcept;

// Opens `path` in a child process and describes it there. Throws stoker::Error: the error the
// child met (its code and text), or, when it died or made no progress for probe_stall_limit(timeout),
// ErrorCode::dataset naming the file and what became of the child. `keep_going`, when given, is
// called at least every 100 ms while the child works; when it returns false the child is killed
// and stoker::Error (ErrorCode::interrupted) thrown. An exception it throws passes through, the
// child killed all the same.
ProbeResult probe_dataset(const std::string& path, const formats::ReaderOptions& options,
                          std::chrono::milliseconds timeout, const std::function<bool()>& keep_going = {});

// The environment variable that tells stoker::init() it is a probe: the socket's number.
inline constexpr const char* kProbeEnv = "STOKER_PROBE_SOCKET";
// In a process exec'd as a probe: reads the request from `sock`, answers, exits.
[[noreturn]] void serve_probe(int sock);

// The parent's reading of the probe's socket (exposed for tests): the progress notes and then the
// answer, until the child closes it (answered: `text` holds the answer without the notes, at most
// `limit` bytes of it and then what came of the next read), or until `stall_limit` passes without a
// byte (stalled; zero: never), or until `keep_going`, called at least every 100 ms, returns false
// (stopped).
enum class ProbeRead { answered, stalled, stopped };
ProbeRead read_probe_answer(int fd, std::size_t limit, std::chrono::milliseconds stall_limit,
                            const std::function<bool()>& keep_going, std::string& text);
// The byte that is a progress note on the probe's socket: never the first of an answer (JSON).
inline constexpr char kProgressNote = '.';

// The JSON the probe answers with (exposed for tests).
std::string probe_result_to_json(const ProbeResult& r);
// Throws stoker::Error (ErrorCode::internal) for text that is not such a result.
ProbeResult probe_result_from_json(const std::string& text);

}  // namespace stoker::detail
