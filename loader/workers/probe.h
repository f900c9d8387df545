// The probe: a loader's first reading of its dataset (the format, the schema, the bounds of bytes
// fields, a few samples, the key scan of an LMDB without a schema) done in a process of its own.
// Neither HDF5 nor LMDB is hardened against hostile files: a damaged or crafted file can crash or
// hang the process that opens it. With workers, that process is never the trainer: the probe runs
// in a child (forked like the fork server, or exec'd like it when the program called stoker::init
// or named a worker executable), and its death or silence becomes an error naming the file. A
// loader without workers reads the file itself (docs/faults.md says so).
#pragma once

#include <chrono>
#include <cstdint>
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
  std::uint64_t locality_rows = 1;
  std::uint64_t file_bytes = 0;              // the dataset's size on disk: no batch holds more of it
  std::uint64_t version = 0;                 // Reader::version()
  std::vector<std::uint64_t> shard_samples;  // a shard set's samples per shard (else empty)
};

// Reads `reader` (open on `path`) as the probe does.
ProbeResult describe_dataset(formats::Reader& reader, const std::string& path);

// Opens `path` in a child process and describes it there. Throws stoker::Error: the error the
// child met (its code and text), or, when it died or made no answer within `timeout` (zero: no
// limit), ErrorCode::dataset naming the file and what became of the child.
ProbeResult probe_dataset(const std::string& path, const formats::ReaderOptions& options,
                          std::chrono::milliseconds timeout);

// The environment variable that tells stoker::init() it is a probe: the socket's number.
inline constexpr const char* kProbeEnv = "STOKER_PROBE_SOCKET";
// In a process exec'd as a probe: reads the request from `sock`, answers, exits.
[[noreturn]] void serve_probe(int sock);

// The JSON the probe answers with (exposed for tests).
std::string probe_result_to_json(const ProbeResult& r);
// Throws stoker::Error (ErrorCode::internal) for text that is not such a result.
ProbeResult probe_result_from_json(const std::string& text);

}  // namespace stoker::detail
