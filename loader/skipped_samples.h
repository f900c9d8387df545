// SkippedSamples: the consumer's account of samples whose decode failed and was skipped
// (Options::on_decode_error = skip): a filled slot records their positions and the worker's notes
// (docs/shm-layout.md, "Skipped samples"); this counts them into Stats, lists the first
// kMaxSkippedIndices distinct ones and words one warning for each the first time it is delivered.
// Not synchronised: its owner holds the lock that guards the Stats it is given.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/batch.h"
#include "stoker/stats.h"

namespace stoker::detail {

class SkippedSamples {
 public:
  // `source`: how messages name the dataset (formats::source_name).
  explicit SkippedSamples(std::string source) : source_(std::move(source)) {}

  // Adds the skipped samples of `batch` (Batch::skipped(), the consumer's checked copy) to `stats`,
  // and returns the warnings to give for them (none for a sample warned of before). `notes`: its
  // slot's notes (SegmentView::error), a line "POSITION MESSAGE" per field of a sample skipped;
  // their messages reach the warnings escaped (stoker::printable), whatever the worker wrote.
  std::vector<std::string> take(const Batch& batch, std::string_view notes, Stats& stats);

 private:
  std::string source_;
  bool warned_limit_ = false;  // Stats::skipped_indices filled up, and a warning said so
};

}  // namespace stoker::detail
