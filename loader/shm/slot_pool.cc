#include "loader/shm/slot_pool.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "loader/batch/batch_builder.h"

namespace stoker {

namespace detail {

SlotPool::SlotPool(ShmSegment segment, SegmentLayout layout, std::uint32_t num_slots)
    : segment_(std::move(segment)),
      layout_(std::move(layout)),
      num_slots_(num_slots),
      held_(num_slots, false),
      free_flag_(num_slots, true),
      keep_alive_(num_slots),
      skipped_(num_slots) {
  layout_.initialize(segment_.data(), num_slots);
  view_ = SegmentView(segment_.data(), layout_);
  // Lowest slot first, so that small runs touch few pages.
  for (std::uint32_t s = num_slots; s-- > 0;) free_.push_back(s);
}

std::optional<std::uint32_t> SlotPool::acquire() {
  std::lock_guard lock(mu_);
  if (free_.empty()) return std::nullopt;
  std::uint32_t s = free_.back();
  free_.pop_back();
  free_flag_[s] = false;
  return s;
}

std::uint32_t SlotPool::in_use() const {
  std::lock_guard lock(mu_);
  return num_slots_ - static_cast<std::uint32_t>(free_.size());
}

void SlotPool::release(std::uint32_t s) noexcept {
  std::shared_ptr<const void> outside;  // freed outside the lock
  std::lock_guard lock(mu_);
  outside = std::move(keep_alive_[s]);
  if (free_flag_[s]) {
    // Two owners for one slot would hand the same memory to two batches: stop here, loudly.
    std::fprintf(stderr, "stoker: internal error: slot %u released twice\n", s);
    std::abort();
  }
  held_[s] = false;
  free_flag_[s] = true;
  free_.push_back(s);
}

Batch SlotPool::make_batch(std::uint32_t s, OutsideBytes outside) {
  const SlotHeader& h = view_.slot_header(s);
  BatchBuilder::Parts b;
  b.id = s;
  b.epoch = h.epoch;
  b.index = h.batch_index;
  b.indices = {view_.slot_indices(s), h.num_samples};
  view_.copy_skipped(s, skipped_[s]);  // slot s is not held: no Batch points at its copy
  b.skipped = skipped_[s];
  const Schema& schema = layout_.schema();
  b.fields.reserve(schema.fields.size());
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    const Field& field = schema.fields[f];
    FieldView v;
    v.name = field.name;
    v.kind = field.kind;
    v.dtype = field.dtype;
    v.shape.reserve(field.shape.size() + 1);
    v.shape.push_back(static_cast<std::int64_t>(h.num_samples));
    v.shape.insert(v.shape.end(), field.shape.begin(), field.shape.end());
    if (!field.is_bytes()) {
      v.data = view_.slot_field(s, f);
      v.bytes = field.bytes_per_sample() * h.num_samples;
    } else if (outside.owner) {
      const OutsideBytes::Field& o = outside.fields[f];
      v.data = o.data;
      v.offsets = o.offsets;
      v.bytes = o.offsets.back();
    } else {
      v.data = view_.slot_data(s, f);
      v.offsets = {view_.slot_offsets(s, f), h.num_samples + std::size_t{1}};
      v.bytes = v.offsets.back();
    }
    b.fields.push_back(std::move(v));
  }
  {
    std::lock_guard lock(mu_);
    held_[s] = true;
    keep_alive_[s] = std::move(outside.owner);
  }
  return BatchBuilder::make(shared_from_this(), std::move(b));
}

std::vector<std::uint64_t> SlotPool::held_batches() const {
  std::vector<std::uint64_t> out;
  std::lock_guard lock(mu_);
  for (std::uint32_t s = 0; s < num_slots_; ++s) {
    if (held_[s]) out.push_back(view_.slot_header(s).batch_index);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace detail
}  // namespace stoker
