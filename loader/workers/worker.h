// What a worker does: take slot numbers from its task ring, fill each slot with its batch (read,
// then the pipelines), hand it back on its done ring, and signal the consumer. The same
// BatchFiller serves the consumer when a loader has no workers. Workers never touch CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "formats/core/reader.h"
#include "loader/pipeline/pipeline.h"
#include "loader/shm/segment_layout.h"

namespace stoker::detail {

// Opens the dataset on first use, in the process that reads it, and checks that it is still the
// dataset the loader was built for.
class LazyReader {
 public:
  LazyReader(std::string path, formats::ReaderOptions options, Schema expected)
      : path_(std::move(path)), options_(std::move(options)), expected_(std::move(expected)) {
    options_.known = expected_;  // what the loader's process found: not scanned again
  }
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
  std::unique_ptr<formats::Reader> reader_;
};

// Fills slots: reads the batch a slot's header and indices describe, runs the pipelines, and
// writes the fields into the slot. Keeps its buffers between batches. One per process.
class BatchFiller {
 public:
  BatchFiller(LazyReader reader, SamplePipelines pipelines)
      : reader_(std::move(reader)), pipelines_(std::move(pipelines)) {}

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

  LazyReader& reader() noexcept { return reader_; }
  // The mean bytes of a sample of the last batch read (bytes fields by their actual length); 0
  // before the first.
  std::uint64_t sample_bytes() const noexcept { return sample_bytes_; }

 private:
  // Reads into the slot (or `overflow`); returns 0, or the bytes a bytes field needed that did
  // not fit.
  std::uint64_t read_into(const SegmentView& view, std::uint32_t s, std::vector<formats::VarBytes>* overflow);

  LazyReader reader_;
  SamplePipelines pipelines_;
  std::vector<formats::VarBytes> bytes_;             // per field: a bytes field as read
  std::vector<std::vector<std::byte>> pipeline_in_;  // per field: a fixed field going into a pipeline
  std::vector<formats::FieldOut> out_;
  std::uint64_t sample_bytes_ = 0;
};

// Samples at least this large are read ahead (Reader::will_need) before they are read: for them a
// storage read is worth a hint; for small ones the hint's lookups would cost more than they save
// on page-cached data.
inline constexpr std::size_t kReadAheadMinSampleBytes = 16 << 10;

struct WorkerContext {
  SegmentView view;
  std::uint32_t worker = 0;
  int task_event = -1;  // eventfd: tasks were pushed
  int done_event = -1;  // eventfd: shared by all workers, signals the consumer
  int lifeline = -1;    // hangs up when the trainer process ends
  std::string path;
  formats::ReaderOptions reader_options;
  Schema expected;
  std::string pipeline;
  std::uint64_t seed = 0;
};

// The worker's loop; returns on the stop sentinel or when the trainer is gone.
void run_worker(const WorkerContext& ctx);

}  // namespace stoker::detail
