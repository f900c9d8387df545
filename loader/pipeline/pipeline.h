// SamplePipelines: the per-sample operations of Options::pipeline (stoker/pipeline.h), built once
// per process from the text and the dataset's schema, then run by a worker on every sample of the
// fields they name. Each process has its own (fork copies it): operations keep scratch memory
// between samples, so a warm pipeline does not allocate. Not synchronised.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loader/pipeline/ops/op.h"
#include "stoker/pipeline.h"
#include "stoker/schema.h"

namespace stoker::detail {

struct FieldPipelineText {
  std::string field;
  std::vector<OpText> ops;
};

// Parses "FIELD=op,op(args),...; FIELD=..."; throws stoker::Error naming what is malformed.
std::vector<FieldPipelineText> parse_pipeline(std::string_view text);

// The random draws of field f's pipeline on sample `index` of `epoch`: a function of these alone, so
// any worker makes the same.
SampleRandom sample_random(std::uint64_t seed, std::uint64_t epoch, std::uint64_t index, std::size_t f);

class SamplePipelines {
 public:
  SamplePipelines();  // none: every field as read
  // Throws stoker::Error naming the field, operation or argument for an unknown field or
  // operation, bad arguments, or a pipeline whose output size is not known (ends in a decoded
  // image of each image's own size).
  // `limits` go to every operation (Options' max_image_pixels).
  SamplePipelines(std::string_view text, const Schema& source, std::uint64_t seed, const OpLimits& limits);
  SamplePipelines(SamplePipelines&&) noexcept;
  SamplePipelines& operator=(SamplePipelines&&) noexcept;
  ~SamplePipelines();

  // The schema delivered: the source's, each field with a pipeline replaced by its output.
  const Schema& output() const noexcept { return output_; }
  bool empty() const noexcept { return chains_.empty(); }
  // Whether source field f has a pipeline.
  bool transforms(std::size_t f) const noexcept { return f < by_field_.size() && by_field_[f] != nullptr; }
  // "jpeg=decode,random_resized_crop(224,224),flip,to_chw", in field order.
  std::string describe() const;
  // Each operation as a stage of a batch, in the pipeline's order: "jpeg: decode", "jpeg: flip"; a
  // pair that runs as one pass is one stage ("jpeg: resize(256)+center_crop(224)"); a repeated one
  // is numbered ("jpeg: flip(0.5) #2").
  std::vector<std::string> stage_names() const;
  // The nanoseconds run() spent in each of stage_names() since the last reset_stage_ns().
  std::span<const std::uint64_t> stage_ns() const noexcept { return stage_ns_; }
  void reset_stage_ns() noexcept { std::fill(stage_ns_.begin(), stage_ns_.end(), 0); }

  // Runs field f's pipeline on sample `index` of `epoch` (input: its bytes, of the source field's
  // kind), writing output().fields[f].bytes_per_sample() bytes at dst. Throws stoker::Error with
  // the operation's reason (the caller names the field and sample).
  void run(std::size_t f, std::span<const std::byte> in, std::uint64_t epoch, std::uint64_t index, std::byte* dst);

 private:
  struct Chain;
  std::vector<std::unique_ptr<Chain>> chains_;
  std::vector<Chain*> by_field_;
  Schema output_;
  std::uint64_t seed_ = 0;
  std::vector<std::uint64_t> stage_ns_;  // per operation of every chain, in chains_' order
};

}  // namespace stoker::detail
