#include "loader/delivery.h"

#include <fmt/format.h>

#include "base/option_spelling.h"
#include "loader/children/program_image.h"
#include "loader/shm/sample_bytes.h"
#include "loader/shm/segment_layout.h"
#include "loader/worker/transform_stage.h"
#include "stoker/error.h"

namespace stoker::detail {

namespace {

// "field 'jpeg' holds JPEG images ...": for each bytes field the pipelines deliver as stored whose
// first sample is an image.
void warn_of_encoded_images(const Schema& pipelines_output, const ProbeResult& probe,
                            const std::function<void(const std::string&)>& warn) {
  for (std::size_t f = 0; f < pipelines_output.fields.size() && f < probe.encoded.size(); ++f) {
    const Field& field = pipelines_output.fields[f];
    if (!field.is_bytes() || field.dtype != DType::u8 || probe.encoded[f].empty()) continue;
    const std::string name = printable(field.name);
    warn(fmt::format(
        "field '{}' holds {} images, delivered as their encoded bytes ('{}' and '{}.offsets'), not as pixels: {} "
        "decodes them (with a crop or resize, every image of a batch the same shape; docs/pipeline.md)",
        name, probe.encoded[f], name, name,
        option_set_to("pipeline", fmt::format("{}=decode,random_resized_crop(224)", name))));
  }
}

}  // namespace

Delivery plan_delivery(const Options& o, const Schema& pipelines_output, const ProbeResult& probe,
                       std::size_t num_workers, const std::function<void(const std::string&)>& warn) {
  Delivery d;
  if (!o.transform.enabled()) warn_of_encoded_images(pipelines_output, probe, warn);  // a transform may decode
  std::vector<std::uint64_t> bound(pipelines_output.fields.size(), 0);
  for (std::size_t f = 0; f < pipelines_output.fields.size(); ++f) {
    if (!pipelines_output.fields[f].is_bytes()) continue;
    bound[f] = slot_bytes_per_sample(probe.typical[f], probe.bounds[f].bytes, probe.bounds[f].exact, probe.file_bytes,
                                     o.batch_size);
  }
  if (!o.transform.enabled()) {
    d.schema = pipelines_output;
    d.sample_bound = std::move(bound);
    return d;
  }
  const Transform& t = o.transform;
  check_transform(t, pipelines_output.num_samples);
  if (num_workers == 0 && !t.local) {
    throw Error(ErrorCode::invalid_option,
                "stoker: transform: without workers the transform runs in this process, and Options::transform.local "
                "is not set");
  }
  if (num_workers > 0 && t.host.empty() && fork_server_image()) {
    throw Error(ErrorCode::invalid_option,
                "stoker: transform: the workers start from a fresh exec of a program (stoker/init.h), which cannot "
                "have this process's transform: name the program that hosts it (Options::transform.host)");
  }
  d.schema = transform_schema(t.fields, pipelines_output.num_samples);
  d.staging_bound = std::move(bound);
  for (const TransformField& f : t.fields) d.sample_bound.push_back(f.ragged ? f.max_sample_bytes : 0);
  return d;
}

DatasetSpec dataset_spec(const Options& o, const formats::ReaderOptions& reader_options, const Schema& found,
                         const std::optional<DatasetIdentity>& identity, const Delivery& delivery) {
  DatasetSpec dataset;
  dataset.path = o.source;
  dataset.reader_options = reader_options;
  dataset.expected = found;
  dataset.pipeline = o.pipeline;
  dataset.op_libraries = o.op_libraries;
  dataset.seed = o.seed;
  dataset.limits = OpLimits{o.max_image_pixels};
  dataset.on_decode_error = o.on_decode_error;
  dataset.identity = identity;
  const Transform& t = o.transform;
  if (!t.enabled()) return dataset;
  dataset.transform = t.fields;
  dataset.transform_payload = t.payload;
  dataset.staging_bound = delivery.staging_bound;
  dataset.local_transform = t.local;
  dataset.transform_host = t.host;
  dataset.transform_started = t.started;
  return dataset;
}

}  // namespace stoker::detail
