// BatchFiller: what a worker does with a slot: reads the batch its header and indices describe
// (the dataset opened lazily, in the process that reads it), runs the pipelines, and writes the
// fields into the slot, or the error into its header. The same filler serves the consumer when a
// loader has no workers, and for a batch too large for its slot. Workers never touch CUDA.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/core/reader.h"
#include "loader/pipeline/pipeline.h"
#include "loader/shm/segment_layout.h"
#include "loader/worker/dataset_spec.h"
#include "loader/worker/stage_times.h"
#include "loader/worker/transform_stage.h"

namespace stoker::detail {

// Opens the dataset on first use, in the process that reads it, and checks that it is still the
// dataset the loader was built for.
class LazyReader {
 public:
  LazyReader(std::string path, formats::ReaderOptions options, Schema expected)
      : path_(std::move(path)), options_(std::move(options)), expected_(std::move(expected)) {
    options_.known = expected_;  // what the loader's process found: not scanned again
  }
  explicit LazyReader(const DatasetSpec& dataset);
  LazyReader(std::unique_ptr<formats::Reader> opened, std::string path)
      : path_(std::move(path)), reader_(std::move(opened)) {}

  formats::Reader& get();
  const std::string& path() const noexcept { return path_; }
  // The reader when it is open (nullptr before the first get()).
  formats::Reader* opened() noexcept { return reader_.get(); }

 private:
  std::string path_;
  formats::ReaderOptions options_;
  Schema expected_;
  std::optional<DatasetIdentity> identity_;  // checked at the open, when set
  std::unique_ptr<formats::Reader> reader_;
};

// Fills slots: reads the batch a slot's header and indices describe, runs the pipelines, and
// writes the fields into the slot. Keeps its buffers between batches. One per process.
//
// A sample a pipeline cannot decode (stoker::Error of ErrorCode::dataset from its operations)
// fails the batch, or with OnDecodeError::skip gets zeros in that field: the slot then records its
// position (SegmentView::skipped) and a note per field naming the file, field, sample and reason
// (docs/shm-layout.md).
class BatchFiller {
 public:
  // The dataset and pipelines of `dataset` (the pipelines built from their text here).
  BatchFiller(const DatasetSpec& dataset, std::size_t batch_size);
  BatchFiller(LazyReader reader, SamplePipelines pipelines, OnDecodeError on_decode_error = OnDecodeError::fail)
      : reader_(std::move(reader)), pipelines_(std::move(pipelines)), on_decode_error_(on_decode_error) {}
  // From now on, each batch goes through `stage` (the user's transform) on its way into the slot.
  void set_transform(std::unique_ptr<TransformStage> stage) noexcept { transform_ = std::move(stage); }
  const SamplePipelines& pipelines() const noexcept { return pipelines_; }

  // Fills slot s and sets its status: ok; error, with the text (prefixed with `who`) in the slot;
  // or too_large, when a bytes field did not fit its region. Never throws.
  void fill(const SegmentView& view, std::uint32_t s, const std::string& who) noexcept;
  // For a too_large slot, in the consumer: the fixed fields into the slot, the bytes fields into
  // `overflow` (one per field). Throws stoker::Error.
  void fill_overflow(const SegmentView& view, std::uint32_t s, std::vector<formats::VarBytes>& overflow);

  // Hints the reader about slot s's samples when they are large enough (kReadAheadMinSampleBytes):
  // by the samples last read, or before the first read by the schema (bytes fields by their exact
  // bound where the format records one), so that a cold start's first batches are read ahead too.
  // Opens the dataset if it is not open yet. Never throws.
  void read_ahead(const SegmentView& view, std::uint32_t s) noexcept;

  // Counters the filler keeps for the consumer: `progress`, bumped at each step of a batch (the
  // fields read, each sample through its pipeline or transform), so that the consumer sees a slow
  // batch progress (WorkerChannel::progress); `sample`, the sample being worked on plus one, 0
  // between them (WorkerChannel::sample), so that the consumer names the sample a worker died on.
  void set_progress_counters(std::atomic<std::uint64_t>* progress, std::atomic<std::uint64_t>* sample) noexcept {
    progress_ = progress;
    sample_ = sample;
  }

  LazyReader& reader() noexcept { return reader_; }
  // The mean bytes of a sample of the last batch read (bytes fields by their actual length); 0
  // before the first.
  std::uint64_t sample_bytes() const noexcept { return sample_bytes_; }

 private:
  // Reads into the slot (or `overflow`); returns 0, or the bytes a bytes field needed that did
  // not fit.
  std::uint64_t read_into(const SegmentView& view, std::uint32_t s, std::vector<formats::VarBytes>* overflow);
  // Runs field f's pipeline on sample k of the batch into `dst`; a sample it cannot decode fails
  // the batch, or is skipped (zeros, and a note) under OnDecodeError::skip.
  void run_pipeline(std::size_t f, std::size_t k, std::span<const std::byte> in, std::uint64_t epoch,
                    std::uint64_t index, std::byte* dst);
  // Reads slot s through the transform: into its staging slot, then the transform into slot s.
  void read_through_transform(const SegmentView& view, std::uint32_t s);
  // Throws stoker::Error (ErrorCode::dataset) naming a sample of a bytes field of values (i32
  // token ids) just read whose bytes are not a whole number of them.
  void check_whole_values(const Schema& source, std::span<const std::uint64_t> indices);
  // "FILE: field 'NAME', sample I", a shard set's sample named by its shard too; without a field,
  // "FILE: sample I".
  std::string sample_name(const Field* field, std::uint64_t index);
  void made_progress() noexcept {
    if (progress_) progress_->fetch_add(1, std::memory_order_relaxed);
  }
  void working_on(std::uint64_t index) noexcept {
    made_progress();
    if (sample_) sample_->store(index + 1, std::memory_order_relaxed);
  }
  void between_samples() noexcept {
    if (sample_) sample_->store(0, std::memory_order_relaxed);
  }

  LazyReader reader_;
  std::uint64_t opens_reported_ = 0;  // the reader's shard_opens() already told in a slot
  SamplePipelines pipelines_;
  OnDecodeError on_decode_error_ = OnDecodeError::fail;
  std::vector<std::uint8_t> skipped_;                // per sample of the batch being read: its decode was skipped
  std::string skip_notes_;                           // of the batch being read: "POSITION MESSAGE\n" per field skipped
  std::vector<formats::VarBytes> bytes_;             // per field: a bytes field as read
  std::vector<std::vector<std::byte>> pipeline_in_;  // per field: a fixed field going into a pipeline
  std::vector<formats::FieldOut> out_;
  std::uint64_t sample_bytes_ = 0;
  std::atomic<std::uint64_t>* progress_ = nullptr;
  std::atomic<std::uint64_t>* sample_ = nullptr;
  StageTimes stages_;  // of the batch being filled
  std::unique_ptr<TransformStage> transform_;
};

// Samples at least this large are read ahead (Reader::will_need) before they are read: for them a
// storage read is worth a hint; for small ones the hint's lookups would cost more than they save
// on page-cached data.
inline constexpr std::size_t kReadAheadMinSampleBytes = 16 << 10;

}  // namespace stoker::detail
