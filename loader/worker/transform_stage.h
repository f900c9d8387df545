// TransformStage: the user's transform (stoker/transform.h) between the pipelines and the slot.
// With a transform, a worker reads and runs the pipelines into a slot of memory of its own, laid
// out like a ring's slot for the pipelines' output (the staging slot), then calls the transform on
// each sample and writes what it returns into the ring's slot, laid out for the transform's fields.
// One per process, beside its BatchFiller; its memory is kept between batches.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loader/shm/segment_layout.h"
#include "loader/shm/shm_segment.h"
#include "loader/worker/dataset_spec.h"
#include "stoker/schema.h"
#include "stoker/transform.h"

namespace stoker::detail {

// The schema a transform's fields are delivered as: a ragged field as a bytes field.
Schema transform_schema(const std::vector<TransformField>& fields, std::uint64_t num_samples);
// Throws stoker::Error (ErrorCode::invalid_option) for fields a ring cannot hold: none but a
// `local` or `host`, an empty or repeated name, a dimension below 1 (a ragged field's first
// dimension is not checked), a ragged field without max_sample_bytes, a scalar ragged field.
void check_transform(const Transform& transform, std::uint64_t num_samples);

// The transform a host process rebuilt from its payload (serve_transform_host), for its workers.
void set_hosted_transform(std::shared_ptr<SampleTransform> transform);
std::shared_ptr<SampleTransform> hosted_transform();

class TransformStage {
 public:
  // `input`: the pipelines' output; `staging_bound`: per input field, bytes a sample of a bytes
  // field is first given in the staging slot (it grows when a batch needs more).
  TransformStage(std::shared_ptr<SampleTransform> transform, Schema input, std::vector<TransformField> output,
                 std::size_t batch_size, std::vector<std::uint64_t> staging_bound);

  // The staging slot, with slot s's task (header and indices) copied into it; read into it.
  const SegmentView& stage(const SegmentView& ring, std::uint32_t s);
  // After a read that did not fit (SlotStatus::too_large, `needed` bytes in a field): a staging slot
  // that holds it, the task copied again.
  const SegmentView& grow(const SegmentView& ring, std::uint32_t s, std::uint64_t needed);
  // Runs the transform on every staged sample into slot s of `ring`, and copies the staging slot's
  // skipped samples there (a skipped sample is not given to the transform: its fields are zeros,
  // a ragged one empty). `sample_name(index)` names a sample in messages; `working_on(index)` is
  // called before each sample's transform. Throws stoker::Error.
  void run(const SegmentView& ring, std::uint32_t s, const std::function<std::string(std::uint64_t)>& sample_name,
           const std::function<void(std::uint64_t)>& working_on);

 private:
  void make_staging(const std::vector<std::uint64_t>& bound);
  const SegmentView& copy_task(const SegmentView& ring, std::uint32_t s);

  std::shared_ptr<SampleTransform> transform_;
  Schema input_;
  std::vector<TransformField> output_;
  std::size_t batch_size_;
  std::vector<std::uint64_t> staging_bound_;
  std::unique_ptr<SegmentLayout> layout_;
  ShmSegment memory_ = ShmSegment::create_private(1);
  SegmentView staging_;
};

// The stage `dataset`'s transform runs in, after pipelines that deliver `staged` (nullptr without a
// transform): the dataset's own transform object in the loader's process and those forked from it,
// the one a host rebuilt (set_hosted_transform) in an exec'd fork server's workers.
std::unique_ptr<TransformStage> make_transform_stage(const DatasetSpec& dataset, const Schema& staged,
                                                     std::size_t batch_size);

}  // namespace stoker::detail
