// What a Loader's slots hold: the pipelines' output, or, with a transform (stoker/transform.h), the
// fields it returns; and the bytes a slot gives a sample of each bytes field.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loader/child_reads/probe.h"
#include "loader/worker/dataset_spec.h"
#include "stoker/options.h"
#include "stoker/schema.h"

namespace stoker::detail {

struct Delivery {
  Schema schema;                             // the slot's fields
  std::vector<std::uint64_t> sample_bound;   // per field of `schema` (slot_bytes_per_sample; ragged: declared)
  std::vector<std::uint64_t> staging_bound;  // with a transform: per field of the pipelines' output
};

// From the pipelines' output and what the probe found of the stored fields. Throws stoker::Error
// (ErrorCode::invalid_option) for a transform the Loader cannot run: its fields malformed
// (check_transform), no `local` one for a Loader without workers, or no host for workers started
// by exec (stoker/init.h).
// `warn` hears what the delivery should make the user look at: an encoded image delivered as bytes
// without a transform, and the pipeline that would decode it.
Delivery plan_delivery(const Options& options, const Schema& pipelines_output, const ProbeResult& probe,
                       std::size_t num_workers, const std::function<void(const std::string&)>& warn);

// What every worker is given: the dataset `reader_options` open and the schema found there, the
// pipelines and the transform.
DatasetSpec dataset_spec(const Options& options, const formats::ReaderOptions& reader_options, const Schema& found,
                         const std::optional<DatasetIdentity>& identity, const Delivery& delivery);

}  // namespace stoker::detail
