// DatasetSpec: what every worker opens (lazily, after fork), the schema it must find there, and the
// pipelines it builds, from text, in its own process. One value per loader, shared by the loader,
// its worker pool, every worker and the consumer's reader of batches too large for their slot; a
// fork server started by exec receives it as JSON (loader/worker/worker_setup.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/core/reader.h"
#include "formats/shard_set.h"
#include "loader/pipeline/pipeline.h"
#include "loader/worker/dataset_identity.h"
#include "stoker/schema.h"
#include "stoker/transform.h"

namespace stoker::detail {

struct DatasetSpec {
  std::string path;
  formats::ReaderOptions reader_options;                // `known` unset: `expected` is what was found
  Schema expected;                                      // the reader's schema, found when the loader opened it
  std::string pipeline;                                 // Options::pipeline
  std::vector<std::string> op_libraries;                // Options::op_libraries, loaded before the pipelines
  std::uint64_t seed = 0;                               // Options::seed, for the pipelines' random numbers
  OpLimits limits;                                      // Options::max_image_pixels, for the pipelines' operations
  OnDecodeError on_decode_error = OnDecodeError::fail;  // Options::on_decode_error
  std::optional<DatasetIdentity> identity;              // the file's when the loader opened it (unset: not checked)
  // Options::transform's fields (empty: none) and its payload, for a host's factory; per field of
  // the pipelines' output, the bytes a sample of a bytes field is first given where the transform
  // reads it (loader/worker/transform_stage.h); and the transform object itself, which only
  // processes forked from the loader's have (it is not sent to an exec'd fork server); the program
  // that hosts it, whose exec is then the fork server.
  std::vector<TransformField> transform;
  std::string transform_payload;
  std::vector<std::uint64_t> staging_bound;
  std::shared_ptr<SampleTransform> local_transform;
  std::vector<std::string> transform_host;         // Options::transform.host: the fork server is an exec of it
  std::shared_ptr<StartedHost> transform_started;  // Options::transform.started: the first such exec, if given

  // How messages name it: the path, or a shard set's first shard and how many more.
  std::string name() const { return formats::source_name(path); }
};

}  // namespace stoker::detail
