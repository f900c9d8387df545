#include "loader/worker/batch_filler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "formats/open_reader.h"
#include "formats/shard_set.h"
#include "formats/sharded_reader.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

std::string describe(const Schema& s) { return fmt::format("{} samples of {}", s.num_samples, s.describe_fields()); }

std::uint64_t nanoseconds_since(std::chrono::steady_clock::time_point from) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - from).count());
}

}  // namespace

LazyReader::LazyReader(const DatasetSpec& dataset)
    : LazyReader(dataset.path, dataset.reader_options, dataset.expected) {
  identity_ = dataset.identity;
}

formats::Reader& LazyReader::get() {
  if (!reader_) {
    auto r = formats::open_reader(path_, options_);
    if (!(r->schema() == expected_)) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: the dataset changed after the loader opened it (was {}, now {})",
                              formats::source_name(path_), describe(expected_), describe(r->schema())));
    }
    // Checked once the file is open, the schema first (its difference says most): the open file is
    // the one compared, whatever happens to the path after.
    std::optional<DatasetIdentity> now = identity_ ? dataset_identity(path_) : std::nullopt;
    if (now) now->version = r->version();
    if (now && *now != *identity_) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: the dataset was replaced or changed since the loader opened it ({}): its samples "
                              "are not mixed into this loader's epochs; build a new Loader to read the new one",
                              formats::source_name(path_), describe_change(*identity_, *now)));
    }
    reader_ = std::move(r);
  }
  return *reader_;
}

std::uint64_t BatchFiller::read_into(const SegmentView& view, std::uint32_t s,
                                     std::vector<formats::VarBytes>* overflow) {
  const SlotHeader& h = view.slot_header(s);
  formats::Reader& r = reader_.get();
  const Schema& source = r.schema();
  const std::size_t nf = source.fields.size();
  const std::span<const std::uint64_t> indices(view.slot_indices(s), h.num_samples);
  bytes_.resize(nf);
  pipeline_in_.resize(nf);
  skipped_.assign(indices.size(), 0);
  skip_notes_.clear();
  out_.assign(nf, formats::FieldOut{});
  for (std::size_t f = 0; f < nf; ++f) {
    const Field& field = source.fields[f];
    if (field.is_bytes()) {
      formats::VarBytes& dst = overflow && !pipelines_.transforms(f) ? (*overflow)[f] : bytes_[f];
      if (!overflow && !pipelines_.transforms(f)) {
        dst.clear_into(view.slot_data(s, f), view.data_capacity(f));  // read straight into the slot
      } else {
        dst.clear();
      }
      out_[f].bytes = &dst;
    } else if (pipelines_.transforms(f)) {
      pipeline_in_[f].resize(field.bytes_per_sample() * indices.size());
      out_[f].fixed = pipeline_in_[f].data();
    } else {
      out_[f].fixed = view.slot_field(s, f);
    }
  }
  const auto read_from = std::chrono::steady_clock::now();
  r.read(indices, out_);
  stages_.add(kStageRead, nanoseconds_since(read_from));
  made_progress();
  check_whole_values(source, indices);
  std::uint64_t read_bytes = source.bytes_per_sample() * indices.size();
  for (const formats::FieldOut& o : out_) read_bytes += o.bytes ? o.bytes->total() : 0;
  sample_bytes_ = indices.empty() ? 0 : read_bytes / indices.size();
  std::uint64_t too_large = 0;
  for (std::size_t f = 0; f < nf; ++f) {
    const Field& field = source.fields[f];
    if (pipelines_.transforms(f)) {
      const std::size_t in_bytes = field.bytes_per_sample(),
                        out_bytes = pipelines_.output().fields[f].bytes_per_sample();
      std::byte* dst = view.slot_field(s, f);
      for (std::size_t k = 0; k < indices.size(); ++k) {
        const std::span<const std::byte> in =
            field.is_bytes() ? bytes_[f].sample(k)
                             : std::span<const std::byte>(pipeline_in_[f].data() + k * in_bytes, in_bytes);
        working_on(indices[k]);
        run_pipeline(f, k, in, h.epoch, indices[k], dst + k * out_bytes);
      }
      between_samples();
    } else if (field.is_bytes() && !overflow) {
      const formats::VarBytes& b = bytes_[f];
      if (b.total() > view.data_capacity(f)) {
        too_large = std::max<std::uint64_t>(too_large, b.total());
        continue;
      }
      const auto write_from = std::chrono::steady_clock::now();
      if (b.total() && !b.writes_into(view.slot_data(s, f))) std::memcpy(view.slot_data(s, f), b.data(), b.total());
      std::memcpy(view.slot_offsets(s, f), b.offsets().data(), b.offsets().size_bytes());
      stages_.add(kStageWrite, nanoseconds_since(write_from));
    }
  }
  // The skipped samples' positions, ascending, and their notes: written for a batch too large for
  // its slot too (its fields with a pipeline are in the slot).
  std::uint32_t* skipped = view.slot_skipped(s);
  std::uint32_t count = 0;
  for (std::size_t k = 0; k < skipped_.size(); ++k) {
    if (skipped_[k]) skipped[1 + count++] = static_cast<std::uint32_t>(k);
  }
  skipped[0] = count;
  view.set_skip_notes(s, skip_notes_);
  return too_large;
}

void BatchFiller::check_whole_values(const Schema& source, std::span<const std::uint64_t> indices) {
  for (std::size_t f = 0; f < source.fields.size(); ++f) {
    const Field& field = source.fields[f];
    const std::size_t element = dtype_size(field.dtype);
    if (!field.is_bytes() || element == 1) continue;
    const std::span<const std::uint64_t> o = out_[f].bytes->offsets();
    for (std::size_t k = 0; k < indices.size(); ++k) {
      if ((o[k + 1] - o[k]) % element == 0) continue;
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: {} bytes, not a whole number of its {}-byte {} values",
                              sample_name(&field, indices[k]), o[k + 1] - o[k], element, dtype_name(field.dtype)));
    }
  }
}

void BatchFiller::read_through_transform(const SegmentView& view, std::uint32_t s) {
  const SegmentView* staging = &transform_->stage(view, s);
  if (const std::uint64_t needed = read_into(*staging, 0, nullptr)) {
    staging = &transform_->grow(view, s, needed);
    if (const std::uint64_t again = read_into(*staging, 0, nullptr)) {
      throw Error(ErrorCode::internal,
                  fmt::format("stoker: a batch's bytes field needed {} bytes after its staging slot grew", again));
    }
  }
  const auto from = std::chrono::steady_clock::now();
  transform_->run(
      view, s, [this](std::uint64_t index) { return sample_name(nullptr, index); },
      [this](std::uint64_t index) { working_on(index); });
  stages_.add(kStageTransform, nanoseconds_since(from));
  between_samples();
}

std::string BatchFiller::sample_name(const Field* field, std::uint64_t index) {
  const std::string what = field ? fmt::format("field '{}', sample", printable(field->name)) : "sample";
  const std::string& path = reader_.path();
  const auto* set = dynamic_cast<const formats::ShardedReader*>(reader_.opened());
  if (set && formats::is_shard_set(path)) {
    const std::vector<std::string> shards = formats::shard_paths(path);
    const std::vector<std::uint64_t>& counts = set->shard_samples();
    std::uint64_t start = 0;
    for (std::size_t k = 0; k < counts.size() && k < shards.size(); ++k) {
      if (index < start + counts[k]) {
        return fmt::format("{}: {} {} (sample {} of the shard set)", shards[k], what, index - start, index);
      }
      start += counts[k];
    }
  }
  return fmt::format("{}: {} {}", path, what, index);
}

void BatchFiller::run_pipeline(std::size_t f, std::size_t k, std::span<const std::byte> in, std::uint64_t epoch,
                               std::uint64_t index, std::byte* dst) {
  const Field& field = reader_.get().schema().fields[f];
  try {
    pipelines_.run(f, in, epoch, index, dst);
  } catch (const Error& e) {
    const std::string message = fmt::format("{}: {}", sample_name(&field, index), e.what());
    if (on_decode_error_ != OnDecodeError::skip || e.code() != ErrorCode::dataset) throw Error(e.code(), message);
    // Skipped: zeros of the declared dtype and shape stand in for the sample, whatever the
    // operations wrote of it before they failed; one line of note each, kept whole or not at all.
    std::memset(dst, 0, pipelines_.output().fields[f].bytes_per_sample());
    skipped_[k] = 1;
    const std::string note = fmt::format("{} {}\n", k, printable(message, Printable::message));
    if (skip_notes_.size() + note.size() <= kErrorTextBytes) skip_notes_ += note;
  } catch (const std::exception& e) {
    throw Error(ErrorCode::dataset, fmt::format("{}: {}", sample_name(&field, index), e.what()));
  }
}

void BatchFiller::fill(const SegmentView& view, std::uint32_t s, const std::string& who) noexcept {
  SlotHeader& h = view.slot_header(s);
  auto t0 = std::chrono::steady_clock::now();
  *view.slot_started_ns(s) =
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count());
  between_samples();
  stages_.reset();
  pipelines_.reset_stage_ns();
  try {
    if (transform_) {
      read_through_transform(view, s);
      h.needed_bytes = 0;
    } else {
      h.needed_bytes = read_into(view, s, nullptr);
    }
    h.status = static_cast<std::uint32_t>(h.needed_bytes ? SlotStatus::too_large : SlotStatus::ok);
  } catch (const Error& e) {
    view.set_error(s, e.code(), fmt::format("{}: batch {} of epoch {}: {}", who, h.batch_index, h.epoch, e.what()));
    h.status = static_cast<std::uint32_t>(SlotStatus::error);
  } catch (const std::exception& e) {
    view.set_error(s, ErrorCode::dataset,
                   fmt::format("{}: batch {} of epoch {}: {}", who, h.batch_index, h.epoch, e.what()));
    h.status = static_cast<std::uint32_t>(SlotStatus::error);
  } catch (...) {
    view.set_error(s, ErrorCode::dataset,
                   fmt::format("{}: batch {} of epoch {}: unknown exception", who, h.batch_index, h.epoch));
    h.status = static_cast<std::uint32_t>(SlotStatus::error);
  }
  between_samples();
  stages_.add_operations(pipelines_.stage_ns());
  std::copy(stages_.ns().begin(), stages_.ns().end(), view.slot_stage_ns(s));
  h.busy_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  if (const formats::Reader* r = reader_.opened()) {
    const std::uint64_t opens = r->shard_opens();
    h.shard_opens = static_cast<std::uint32_t>(std::min<std::uint64_t>(opens - opens_reported_, UINT32_MAX));
    opens_reported_ = opens;
  }
}

void BatchFiller::fill_overflow(const SegmentView& view, std::uint32_t s, std::vector<formats::VarBytes>& overflow) {
  overflow.resize(reader_.get().schema().fields.size());
  read_into(view, s, &overflow);
}

namespace {

// What a sample of r is expected to weigh before any has been read.
std::uint64_t expected_sample_bytes(const formats::Reader& r) {
  const Schema& schema = r.schema();
  std::uint64_t n = schema.bytes_per_sample();
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    if (!schema.fields[f].is_bytes()) continue;
    const formats::SampleBound b = r.sample_bound(f);
    n += b.exact ? b.bytes : 0;  // an estimate is not trusted for this: it may be far too large
  }
  return n;
}

}  // namespace

void BatchFiller::read_ahead(const SegmentView& view, std::uint32_t s) noexcept {
  formats::Reader* r = reader_.opened();
  if (!r) {
    // The first batches are those a cold start waits for most: open the dataset for them now.
    try {
      r = &reader_.get();
    } catch (const std::exception&) {
      return;  // fill() opens it again and reports why it cannot
    }
  }
  try {
    const std::uint64_t bytes = sample_bytes_ ? sample_bytes_ : expected_sample_bytes(*r);
    if (bytes < kReadAheadMinSampleBytes) return;
  } catch (const std::exception&) {
    return;
  }
  r->will_need({view.slot_indices(s), view.slot_header(s).num_samples});
}

BatchFiller::BatchFiller(const DatasetSpec& dataset, std::size_t batch_size)
    : BatchFiller(LazyReader(dataset),
                  SamplePipelines(dataset.pipeline, dataset.expected, dataset.seed, dataset.limits),
                  dataset.on_decode_error) {
  transform_ = make_transform_stage(dataset, pipelines_.output(), batch_size);
}

}  // namespace stoker::detail
