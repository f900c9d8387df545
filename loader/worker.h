// What a worker does: take slot numbers from its task ring, fill each slot with its batch, hand it
// back on its done ring, and signal the consumer. The same fill_slot() serves the consumer when a
// loader has no workers. Workers never touch CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "formats/reader.h"
#include "loader/segment_layout.h"

namespace stoker::detail {

// Opens the dataset on first use, in the process that reads it, and checks that it is still the
// dataset the loader was built for.
class LazyReader {
 public:
  LazyReader(std::string path, formats::ReaderOptions options, Schema expected)
      : path_(std::move(path)), options_(std::move(options)), expected_(std::move(expected)) {}
  explicit LazyReader(std::unique_ptr<formats::Reader> opened) : reader_(std::move(opened)) {}

  formats::Reader& get();
  // The reader when it is open (nullptr before the first get()).
  formats::Reader* opened() noexcept { return reader_.get(); }

 private:
  std::string path_;
  formats::ReaderOptions options_;
  Schema expected_;
  std::unique_ptr<formats::Reader> reader_;
};

// Reads the batch described by slot s's header and indices into the slot; on failure stores the
// error text (prefixed with `who`) in the slot instead. Never throws.
void fill_slot(const SegmentView& view, std::uint32_t s, LazyReader& reader, const std::string& who) noexcept;

// Samples at least this large are read ahead (Reader::will_need) before they are read: for them a
// storage read is worth a hint; for small ones the hint's lookups would cost more than they save
// on page-cached data.
inline constexpr std::size_t kReadAheadMinSampleBytes = 16 << 10;

// Hints the reader about slot s's samples (see kReadAheadMinSampleBytes). Never throws.
void read_ahead(const SegmentView& view, std::uint32_t s, LazyReader& reader) noexcept;

struct WorkerContext {
  SegmentView view;
  std::uint32_t worker = 0;
  int task_event = -1;  // eventfd: tasks were pushed
  int done_event = -1;  // eventfd: shared by all workers, signals the consumer
  int lifeline = -1;    // hangs up when the trainer process ends
  std::string path;
  formats::ReaderOptions reader_options;
  Schema expected;
};

// The worker's loop; returns on the stop sentinel or when the trainer is gone.
void run_worker(const WorkerContext& ctx);

}  // namespace stoker::detail
