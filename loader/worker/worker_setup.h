// WorkerSetup: everything a fork server started by exec needs to run a loader's workers, as text
// (JSON) for the socket, besides the descriptors that travel with it (loader/processes/setup_channel.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loader/worker/dataset_spec.h"
#include "stoker/options.h"

namespace stoker::detail {

// The ring the workers share, besides the dataset.
struct RingSetup {
  std::uint32_t num_workers = 0;
  std::uint64_t batch_size = 0;
  std::vector<std::uint64_t> sample_bound;  // the layout's, per delivered field
  std::uint64_t segment_bytes = 0;
  std::string stoker_version;  // of the loader that sent it: a fork server of another refuses it
  OptionSpelling option_spelling = OptionSpelling::cpp;  // the loader's process's, for messages
};

std::string setup_to_json(const DatasetSpec& dataset, const RingSetup& ring);

// What the workers write into a slot: the transform's fields, or else the pipelines' output.
Schema delivered_schema(const DatasetSpec& dataset);

struct WorkerSetup {
  DatasetSpec dataset;
  RingSetup ring;
};
// Throws stoker::Error (ErrorCode::internal) for text that is not a setup.
WorkerSetup setup_from_json(const std::string& text);

// The descriptors sent with a setup, in this order: the segment, the lifeline's read end, the
// "done" eventfd, then one task eventfd per worker.
inline constexpr std::size_t kSetupFixedFds = 3;

}  // namespace stoker::detail
