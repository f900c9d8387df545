// The layout of a loader's shared-memory segment, specified in docs/shm-layout.md. Offsets are
// from the start of the segment; all multi-byte values are native (little-endian) and the segment
// never leaves the machine.
//
//   [0, control_bytes)          SegmentHeader, FieldLayout[num_fields], WorkerChannel[num_workers]
//   [slots_offset + s * slot_bytes, ...)   slot s: SlotHeader, indices, error text, skipped samples,
//     stage times and start, field regions (a fixed field's array; a bytes field's B+1 offsets,
//     then its data)
//
// Every slot is in exactly one place at a time: the consumer's free list, one worker's task ring
// (assigned), that worker's done ring (filled), or a live Batch (held). So no ring can overflow.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loader/shm/segment_header.h"
#include "loader/shm/worker_channel.h"
#include "stoker/error.h"
#include "stoker/schema.h"

namespace stoker::detail {

// Where everything is, computed from the schema and sizes; a view over a mapped segment.
class SegmentLayout {
 public:
  // `sample_bound`: per field, the bytes a sample of a bytes field is given (its region holds
  // batch_size of them); ignored for fixed fields.
  SegmentLayout(const Schema& schema, std::size_t batch_size, std::uint32_t num_workers,
                const std::vector<std::uint64_t>& sample_bound = {});

  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  std::size_t control_bytes(std::uint32_t num_slots) const noexcept;
  std::size_t segment_bytes(std::uint32_t num_slots) const noexcept;

  // Writes the header and initialises the rings of a fresh segment of segment_bytes(num_slots).
  void initialize(std::byte* base, std::uint32_t num_slots) const;
  // "" when the `mapped_bytes` at `base` are a segment this layout initialised (magic, version,
  // sizes, every offset and field), else what differs: a fork server or worker must not write into
  // a ring it does not understand (one from another build of stoker, say).
  std::string check(const std::byte* base, std::size_t mapped_bytes) const;

  const Schema& schema() const noexcept { return schema_; }
  std::size_t batch_size() const noexcept { return batch_size_; }
  std::uint32_t num_workers() const noexcept { return num_workers_; }
  const std::vector<std::uint64_t>& sample_bound() const noexcept { return sample_bound_; }

 private:
  Schema schema_;
  std::vector<std::uint64_t> sample_bound_;
  std::size_t batch_size_;
  std::uint32_t num_workers_;
  std::size_t indices_offset_ = sizeof(SlotHeader);
  std::size_t error_offset_ = 0;
  std::size_t skipped_offset_ = 0;
  std::size_t stages_offset_ = 0;
  std::vector<std::size_t> field_offsets_;
  std::vector<std::size_t> data_offsets_;     // bytes fields: where the data starts, after the offsets
  std::vector<std::uint64_t> data_capacity_;  // bytes fields: room for the data
  std::size_t slot_bytes_ = 0;

  friend class SegmentView;
};

// Typed access to a mapped, initialised segment.
class SegmentView {
 public:
  SegmentView() = default;
  SegmentView(std::byte* base, const SegmentLayout& layout);

  SlotHeader& slot_header(std::uint32_t s) const noexcept;
  std::uint64_t* slot_indices(std::uint32_t s) const noexcept;
  char* slot_error(std::uint32_t s) const noexcept;
  std::byte* slot_field(std::uint32_t s, std::size_t f) const noexcept;
  // Bytes fields: the batch's B+1 offsets, its data, and the room for the data.
  std::uint64_t* slot_offsets(std::uint32_t s, std::size_t f) const noexcept {
    return reinterpret_cast<std::uint64_t*>(slot_field(s, f));
  }
  std::byte* slot_data(std::uint32_t s, std::size_t f) const noexcept { return slot_begin(s) + data_offsets_[f]; }
  std::uint64_t data_capacity(std::size_t f) const noexcept { return data_capacity_[f]; }
  std::byte* slot_begin(std::uint32_t s) const noexcept;
  std::size_t slot_bytes() const noexcept { return header_->slot_bytes; }
  // The samples of the batch whose decode failed and was skipped (Options::on_decode_error): a
  // count, then their positions in the batch, ascending (docs/shm-layout.md).
  std::uint32_t* slot_skipped(std::uint32_t s) const noexcept;
  // Slot s's stage times: kStageSlots u64 nanoseconds, written by the worker that fills it; then
  // when it started filling it (steady_clock's nanoseconds: CLOCK_MONOTONIC, one clock for all
  // processes).
  std::uint64_t* slot_stage_ns(std::uint32_t s) const noexcept;
  std::uint64_t* slot_started_ns(std::uint32_t s) const noexcept { return slot_stage_ns(s) + kStageSlots; }
  // "" when slot s's skipped samples' record is well formed for a batch of `num_samples` (a count
  // of at most num_samples, positions ascending and below it, notes within their region), else
  // what is wrong. A worker, or the child that reads a batch again, is another process: its record
  // is checked before it is used (loader/producers/slot_check.h, loader/child_reads/overflow_read.h).
  std::string check_skipped(std::uint32_t s, std::uint32_t num_samples) const;
  // Copies into `out` (cleared first) the positions slot s records as skipped, as far as they are
  // well formed: a count cut at the slot's num_samples, a position not above the one before or not
  // below num_samples ending the copy. The copy is the consumer's own: a process that still maps
  // the slot cannot change it after.
  void copy_skipped(std::uint32_t s, std::vector<std::uint32_t>& out) const;
  WorkerChannel channel(std::uint32_t w) const noexcept;
  // SegmentHeader::awaited_slot. The consumer stores the slot it will sleep for, then looks at the
  // done rings; a worker pushes its slot, then loads this: each with a seq_cst fence between, so
  // that one of the two sees the other (the consumer the slot, or the worker that it is awaited).
  std::atomic<std::uint64_t>& awaited_slot() const noexcept {
    return *reinterpret_cast<std::atomic<std::uint64_t>*>(base_ + offsetof(SegmentHeader, awaited_slot));
  }

  // Writes `message` (truncated to fit) as slot s's error text, and its code.
  void set_error(std::uint32_t s, ErrorCode code, std::string_view message) const noexcept;
  // Writes the notes of slot s's skipped samples (at most kErrorTextBytes) where an error's text
  // goes: a slot of status ok or too_large has no error.
  void set_skip_notes(std::uint32_t s, std::string_view notes) const noexcept;
  // Slot s's error text or notes: error_bytes of them, never more than kErrorTextBytes.
  std::string_view error(std::uint32_t s) const noexcept;
  // The error a slot of status error holds (ErrorCode::internal for a code no stoker writes).
  Error slot_error_of(std::uint32_t s) const;

 private:
  std::byte* base_ = nullptr;
  const SegmentHeader* header_ = nullptr;
  std::size_t indices_offset_ = 0;
  std::size_t error_offset_ = 0;
  std::size_t skipped_offset_ = 0;
  std::size_t stages_offset_ = 0;
  std::vector<std::size_t> field_offsets_;
  std::vector<std::size_t> data_offsets_;
  std::vector<std::uint64_t> data_capacity_;
};

}  // namespace stoker::detail
