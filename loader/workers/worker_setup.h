// WorkerSetup: everything a fork server started by exec needs to run a loader's workers, as text
// (JSON) for the socket, besides the descriptors that travel with it (SCM_RIGHTS).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "formats/core/reader.h"
#include "stoker/schema.h"

namespace stoker::detail {

struct WorkerSetup {
  std::string path;
  formats::ReaderOptions reader_options;  // `known` is not sent: it is `expected`
  Schema expected;                        // the reader's schema
  std::string pipeline;
  std::uint64_t seed = 0;
  std::uint32_t num_workers = 0;
  std::uint64_t batch_size = 0;
  std::vector<std::uint64_t> sample_bound;  // the layout's, per delivered field
  std::uint64_t segment_bytes = 0;

  std::string to_json() const;
  // Throws stoker::Error for text that is not a setup.
  static WorkerSetup from_json(const std::string& text);
};

// The descriptors sent with a setup, in this order: the segment, the lifeline's read end, the
// "done" eventfd, then one task eventfd per worker.
inline constexpr std::size_t kSetupFixedFds = 3;

}  // namespace stoker::detail
