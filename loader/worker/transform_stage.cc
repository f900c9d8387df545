#include "loader/worker/transform_stage.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>

#include "stoker/error.h"

namespace stoker {

SampleTransform::~SampleTransform() = default;

}  // namespace stoker

namespace stoker::detail {
namespace {

std::string describe(DType dtype, std::span<const std::int64_t> shape) {
  return fmt::format("{}[{}]", dtype_name(dtype), fmt::join(shape, ","));
}

std::string describe(const TransformField& f) {
  if (!f.ragged) return describe(f.dtype, f.shape);
  std::vector<std::string> dims{"*"};
  for (std::size_t d = 1; d < f.shape.size(); ++d) dims.push_back(std::to_string(f.shape[d]));
  return fmt::format("{}[{}]", dtype_name(f.dtype), fmt::join(dims, ","));
}

Error transform_error(const std::string& message) { return Error(ErrorCode::transform, message); }

// What the transform puts for one sample, written into the ring's slot: fixed fields in place, a
// ragged field's values gathered for the batch (copied into the slot once the batch is done).
class SlotSink final : public SampleSink {
 public:
  SlotSink(const std::vector<TransformField>& fields, const SegmentView& ring, std::uint32_t s)
      : fields_(fields), ring_(ring), s_(s), values_(fields.size()), offsets_(fields.size()), put_(fields.size()) {
    for (auto& o : offsets_) o.assign(1, 0);
    for (const Field& f : transform_schema(fields, 0).fields) slot_bytes_.push_back(f.bytes_per_sample());
  }

  void start(std::size_t k) {
    k_ = k;
    std::fill(put_.begin(), put_.end(), 0);
  }

  void put(const SampleField& in) override {
    std::size_t f = 0;
    while (f < fields_.size() && fields_[f].name != in.name) ++f;
    if (f == fields_.size()) {
      throw transform_error(fmt::format("the transform returned a field '{}' it did not declare (declared: {})",
                                        printable(in.name), declared()));
    }
    const TransformField& want = fields_[f];
    if (put_[f]) throw transform_error(fmt::format("the transform returned field '{}' twice", printable(in.name)));
    const bool same_shape = want.ragged ? in.shape.size() == want.shape.size() &&
                                              std::equal(in.shape.begin() + (in.shape.empty() ? 0 : 1), in.shape.end(),
                                                         want.shape.begin() + (want.shape.empty() ? 0 : 1))
                                        : std::ranges::equal(in.shape, want.shape);
    if (in.dtype != want.dtype || !same_shape) {
      throw transform_error(
          fmt::format("the transform returned field '{}' as {}, not {} as declared (or learned from "
                      "the first sample){}",
                      printable(in.name), describe(in.dtype, in.shape), describe(want),
                      want.ragged ? "" : "; a field whose first dimension varies is declared ragged"));
    }
    std::uint64_t elements = 1;
    for (const std::int64_t d : in.shape) elements *= static_cast<std::uint64_t>(d);
    if (in.data.size() != elements * dtype_size(in.dtype)) {
      throw transform_error(fmt::format("the transform's field '{}' holds {} bytes, not the {} of {}",
                                        printable(in.name), in.data.size(), elements * dtype_size(in.dtype),
                                        describe(in.dtype, in.shape)));
    }
    put_[f] = 1;
    if (want.ragged) {
      values_[f].insert(values_[f].end(), in.data.begin(), in.data.end());
      offsets_[f].push_back(values_[f].size());
    } else if (!in.data.empty()) {
      std::memcpy(ring_.slot_field(s_, f) + k_ * in.data.size(), in.data.data(), in.data.size());
    }
  }

  // Zeros (a ragged field: no values) for a sample the transform did not see.
  void put_zeros(std::size_t k) {
    for (std::size_t f = 0; f < fields_.size(); ++f) {
      if (fields_[f].ragged) {
        offsets_[f].push_back(values_[f].size());
        continue;
      }
      const std::size_t bytes = slot_bytes_[f];
      std::memset(ring_.slot_field(s_, f) + k * bytes, 0, bytes);
    }
  }

  void check_complete() const {
    for (std::size_t f = 0; f < fields_.size(); ++f) {
      if (!put_[f]) {
        throw transform_error(fmt::format("the transform did not return field '{}', which the first sample had",
                                          printable(fields_[f].name)));
      }
    }
  }

  // The ragged fields' values and offsets into the slot.
  void finish(const std::string& batch_name) const {
    for (std::size_t f = 0; f < fields_.size(); ++f) {
      if (!fields_[f].ragged) continue;
      if (values_[f].size() > ring_.data_capacity(f)) {
        throw transform_error(fmt::format(
            "{}: the transform's ragged field '{}' holds {} bytes for this batch, and its region {} ({} per "
            "sample): declare a larger bound for it (ragged={{'{}': the most elements a sample has}})",
            batch_name, printable(fields_[f].name), values_[f].size(), ring_.data_capacity(f),
            fields_[f].max_sample_bytes, printable(fields_[f].name)));
      }
      if (!values_[f].empty()) std::memcpy(ring_.slot_data(s_, f), values_[f].data(), values_[f].size());
      std::memcpy(ring_.slot_offsets(s_, f), offsets_[f].data(), offsets_[f].size() * sizeof(std::uint64_t));
    }
  }

 private:
  std::string declared() const {
    std::vector<std::string> names;
    for (const auto& f : fields_) names.push_back("'" + printable(f.name) + "'");
    return fmt::format("{}", fmt::join(names, ", "));
  }

  const std::vector<TransformField>& fields_;
  const SegmentView& ring_;
  std::uint32_t s_;
  std::size_t k_ = 0;
  std::vector<std::vector<std::byte>> values_;
  std::vector<std::vector<std::uint64_t>> offsets_;
  std::vector<std::uint8_t> put_;
  std::vector<std::size_t> slot_bytes_;  // per field: a sample's bytes in the slot (0 for a ragged field)
};

std::mutex hosted_mu;
std::shared_ptr<SampleTransform>& hosted() {
  static std::shared_ptr<SampleTransform> t;
  return t;
}

}  // namespace

Schema transform_schema(const std::vector<TransformField>& fields, std::uint64_t num_samples) {
  Schema s;
  s.num_samples = num_samples;
  for (const TransformField& f : fields) {
    s.fields.push_back(f.ragged ? Field::bytes_field(f.name) : Field{f.name, FieldKind::fixed, f.dtype, f.shape});
  }
  return s;
}

void check_transform(const Transform& t, std::uint64_t num_samples) {
  if (!t.enabled()) return;
  const auto bad = [](const std::string& m) { return Error(ErrorCode::invalid_option, "stoker: transform: " + m); };
  if (!t.local && t.host.empty()) throw bad("neither a local transform nor a host program to run it in");
  if (t.started && t.host.empty()) {
    throw bad(
        "a started host (Transform::started) without Transform::host, the program it is: a fork server that "
        "ends is started again from it");
  }
  std::set<std::string> names;
  for (const TransformField& f : t.fields) {
    if (f.ragged && f.shape.empty()) {
      throw bad(fmt::format("field '{}' is ragged but a scalar: a ragged field has a first dimension that varies",
                            printable(f.name)));
    }
    if (f.ragged && f.max_sample_bytes == 0) {
      throw bad(fmt::format("ragged field '{}' has no max_sample_bytes", printable(f.name)));
    }
    if (f.ragged && f.max_sample_bytes > kMaxSampleBytes) {
      throw bad(fmt::format("ragged field '{}': max_sample_bytes {} is above the most a sample may hold ({})",
                            printable(f.name), f.max_sample_bytes, kMaxSampleBytes));
    }
    if (!names.insert(f.name).second) throw bad(fmt::format("field '{}' is declared twice", printable(f.name)));
  }
  try {
    transform_schema(t.fields, num_samples).validate("stoker: transform");
  } catch (const Error& e) {
    throw Error(ErrorCode::invalid_option, e.what());
  }
  for (const TransformField& f : t.fields) {
    if (!f.ragged) continue;
    for (std::size_t d = 1; d < f.shape.size(); ++d) {
      if (f.shape[d] < 1) throw bad(fmt::format("ragged field '{}' has a dimension below 1", printable(f.name)));
    }
  }
}

void set_hosted_transform(std::shared_ptr<SampleTransform> transform) {
  const std::lock_guard lock(hosted_mu);
  hosted() = std::move(transform);
}

std::shared_ptr<SampleTransform> hosted_transform() {
  const std::lock_guard lock(hosted_mu);
  return hosted();
}

TransformStage::TransformStage(std::shared_ptr<SampleTransform> transform, Schema input,
                               std::vector<TransformField> output, std::size_t batch_size,
                               std::vector<std::uint64_t> staging_bound)
    : transform_(std::move(transform)),
      input_(std::move(input)),
      output_(std::move(output)),
      batch_size_(batch_size),
      staging_bound_(std::move(staging_bound)) {
  staging_bound_.resize(input_.fields.size(), 0);
  for (std::size_t f = 0; f < input_.fields.size(); ++f) {
    if (input_.fields[f].is_bytes()) staging_bound_[f] = std::max<std::uint64_t>(staging_bound_[f], 4096);
  }
}

std::unique_ptr<TransformStage> make_transform_stage(const DatasetSpec& dataset, const Schema& staged,
                                                     std::size_t batch_size) {
  if (dataset.transform.empty()) return nullptr;
  std::shared_ptr<SampleTransform> t = dataset.local_transform ? dataset.local_transform : hosted_transform();
  if (!t) throw Error(ErrorCode::internal, "stoker: a worker was given a transform's fields and no transform");
  return std::make_unique<TransformStage>(std::move(t), staged, dataset.transform, batch_size, dataset.staging_bound);
}

void TransformStage::make_staging(const std::vector<std::uint64_t>& bound) {
  layout_ = std::make_unique<SegmentLayout>(input_, batch_size_, 1, bound);
  memory_ = ShmSegment::create_private(layout_->segment_bytes(1));
  layout_->initialize(memory_.data(), 1);
  staging_ = SegmentView(memory_.data(), *layout_);
}

const SegmentView& TransformStage::copy_task(const SegmentView& ring, std::uint32_t s) {
  const SlotHeader& h = ring.slot_header(s);
  staging_.slot_header(0) = h;
  std::memcpy(staging_.slot_indices(0), ring.slot_indices(s), h.num_samples * sizeof(std::uint64_t));
  return staging_;
}

const SegmentView& TransformStage::stage(const SegmentView& ring, std::uint32_t s) {
  if (!layout_) make_staging(staging_bound_);
  return copy_task(ring, s);
}

const SegmentView& TransformStage::grow(const SegmentView& ring, std::uint32_t s, std::uint64_t needed) {
  const std::uint64_t per_sample = needed / std::max<std::size_t>(batch_size_, 1) + 1;
  for (std::size_t f = 0; f < input_.fields.size(); ++f) {
    if (input_.fields[f].is_bytes()) staging_bound_[f] = std::max(staging_bound_[f], per_sample * 2);
  }
  make_staging(staging_bound_);
  return copy_task(ring, s);
}

void TransformStage::run(const SegmentView& ring, std::uint32_t s,
                         const std::function<std::string(std::uint64_t)>& sample_name,
                         const std::function<void(std::uint64_t)>& working_on) {
  const SlotHeader& h = ring.slot_header(s);
  const std::uint32_t* skipped = staging_.slot_skipped(0);
  std::vector<std::uint8_t> skip(h.num_samples, 0);
  for (std::uint32_t i = 0; i < std::min(skipped[0], h.num_samples); ++i) {
    if (skipped[1 + i] < h.num_samples) skip[skipped[1 + i]] = 1;
  }
  const std::size_t nf = input_.fields.size();
  std::vector<SampleField> in(nf);
  std::vector<std::int64_t> lengths(nf);
  SlotSink sink(output_, ring, s);
  for (std::uint32_t k = 0; k < h.num_samples; ++k) {
    const std::uint64_t index = ring.slot_indices(s)[k];
    if (skip[k]) {
      sink.put_zeros(k);
      continue;
    }
    for (std::size_t f = 0; f < nf; ++f) {
      const Field& field = input_.fields[f];
      in[f].name = field.name;
      in[f].dtype = field.dtype;
      if (field.is_bytes()) {
        const std::uint64_t* o = staging_.slot_offsets(0, f);
        lengths[f] = static_cast<std::int64_t>((o[k + 1] - o[k]) / dtype_size(field.dtype));  // elements
        in[f].shape = {&lengths[f], 1};
        in[f].data = {staging_.slot_data(0, f) + o[k], o[k + 1] - o[k]};
      } else {
        in[f].shape = field.shape;
        in[f].data = {staging_.slot_field(0, f) + k * field.bytes_per_sample(), field.bytes_per_sample()};
      }
    }
    if (working_on) working_on(index);
    sink.start(k);
    try {
      transform_->apply(in, h.epoch, index, sink);
      sink.check_complete();
    } catch (const Error& e) {
      throw Error(e.code() == ErrorCode::dataset ? ErrorCode::transform : e.code(),
                  fmt::format("{}: {}", sample_name(index), e.what()));
    } catch (const std::exception& e) {
      throw transform_error(fmt::format("{}: the transform failed: {}", sample_name(index), e.what()));
    }
  }
  sink.finish(fmt::format("batch {} of epoch {}", h.batch_index, h.epoch));
  // The skipped samples' record and notes, as the staging slot has them.
  std::memcpy(ring.slot_skipped(s), skipped, (1 + std::min(skipped[0], h.num_samples)) * sizeof(std::uint32_t));
  ring.set_skip_notes(s, staging_.error(0));
}

}  // namespace stoker::detail
