#include "loader/producers/filled_batch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <utility>

#include "base/posix_error.h"
#include "loader/child_reads/overflow_read.h"

namespace stoker::detail {

FilledBatches::FilledBatches(std::shared_ptr<SlotPool> slots, std::shared_ptr<const DatasetSpec> dataset,
                             std::size_t batch_size, Outside outside)
    : slots_(std::move(slots)), dataset_(std::move(dataset)), batch_size_(batch_size), outside_(std::move(outside)) {}

OutsideBytes FilledBatches::read_outside(std::uint32_t s, std::vector<std::string>& warnings) {
  const SegmentView& v = slots_->view();
  const SlotHeader h = v.slot_header(s);  // a copy: the read may write into the slot
  const Schema& schema = slots_->layout().schema();
  if (!filler_) filler_ = std::make_unique<BatchFiller>(*dataset_, batch_size_);
  const OverflowBound bound = overflow_bound(outside_.file_bytes, outside_.local_ranks);
  // The file is not parsed in this process when workers exist (loader/child_reads/overflow_read.h).
  OutsideBytes out = outside_.in_child
                         ? read_overflow_in_child(*filler_, v, s, schema, bound, outside_.source, outside_.timeout)
                         : read_overflow_here(*filler_, v, s, schema, bound, outside_.source);
  // Said once, with the batch it comes with (a read that fails names the batch in its error).
  if (!std::exchange(warned_, true)) {
    std::vector<std::string> regions;
    for (std::size_t f = 0; f < schema.fields.size(); ++f) {
      if (schema.fields[f].is_bytes()) {
        regions.push_back(fmt::format("'{}' {}", schema.fields[f].name, format_bytes(v.data_capacity(f))));
      }
    }
    warnings.push_back(
        fmt::format("batch {} of epoch {} needs {} for a bytes field, more than its region in shared memory holds "
                    "({}, sized from a few samples): such batches are read again outside the ring, "
                    "which is slower (docs/shm-layout.md)",
                    h.batch_index, h.epoch, format_bytes(h.needed_bytes), fmt::join(regions, ", ")));
  }
  return out;
}

FilledBatch FilledBatches::take(std::uint32_t s, std::vector<std::string>& warnings) {
  const SegmentView& v = slots_->view();
  const SlotHeader& h = v.slot_header(s);
  OutsideBytes outside;
  const bool too_large = h.status == static_cast<std::uint32_t>(SlotStatus::too_large);
  if (too_large) {
    try {
      outside = read_outside(s, warnings);
    } catch (...) {
      slots_->release(s);
      throw;
    }
  } else if (h.status != static_cast<std::uint32_t>(SlotStatus::ok)) {
    Error error = v.slot_error_of(s);
    slots_->release(s);
    throw error;
  }
  FilledBatch out;
  out.facts = {h.worker, h.epoch,  h.batch_index, h.num_samples, h.busy_ns, h.shard_opens, *v.slot_started_ns(s),
               {},       too_large};
  std::copy_n(v.slot_stage_ns(s), kStageSlots, out.facts.stage_ns.begin());
  out.skip_notes = std::string(v.error(s));
  out.batch = slots_->make_batch(s, std::move(outside));  // last: the slot is the batch's from here
  return out;
}

}  // namespace stoker::detail
