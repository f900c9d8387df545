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

#include "stoker/error.h"
#include "stoker/schema.h"

namespace stoker::detail {

inline constexpr char kSegmentMagic[8] = {'S', 'T', 'O', 'K', 'E', 'R', 'S', 'M'};
inline constexpr std::uint32_t kSegmentVersion = 6;
inline constexpr std::size_t kErrorTextBytes = 4096;
// The stage times of a slot: the nanoseconds its worker spent in each stage of the batch
// (loader/workers/stage_times.h), the last entry holding the stages past it.
inline constexpr std::size_t kStageSlots = 32;
inline constexpr std::uint32_t kStopWorker = 0xffffffffu;  // task ring sentinel: exit

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "rings in shared memory need lock-free atomics");

// The sequentially consistent fence of the handshakes between processes (awaited_slot, idle): a
// store, this fence, then a load, on each side. ThreadSanitizer, which sees one process only, does
// not model fences (GCC says so, -Wtsan): hidden from it.
inline void shared_memory_fence() noexcept {
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wtsan"
#endif
  std::atomic_thread_fence(std::memory_order_seq_cst);
#if defined(__SANITIZE_THREAD__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
}

struct SegmentHeader {
  char magic[8];
  std::uint32_t version;
  std::uint32_t num_slots;
  std::uint32_t num_workers;
  std::uint32_t num_fields;
  std::uint64_t batch_size;
  std::uint64_t segment_bytes;
  std::uint64_t control_bytes;
  std::uint64_t slots_offset;
  std::uint64_t slot_bytes;
  std::uint64_t channels_offset;
  std::uint64_t channel_bytes;
  std::uint64_t fields_offset;
  // The slot the consumer is about to sleep waiting for, plus one; 0 while it waits for none. A
  // worker that finished a slot wakes the consumer (the done eventfd) only when it is this one.
  // Read and written as an atomic (SegmentView::awaited_slot).
  std::uint64_t awaited_slot;
  std::uint8_t reserved[32];
};
static_assert(sizeof(SegmentHeader) == 128);

struct FieldLayout {
  std::uint8_t kind;   // FieldKind
  std::uint8_t dtype;  // DType
  std::uint8_t reserved[6];
  std::uint64_t offset;            // of the field's array within a slot
  std::uint64_t bytes_per_sample;  // fixed fields
  std::uint64_t capacity;          // bytes reserved for the array in every slot
};
static_assert(sizeof(FieldLayout) == 32);

// too_large: a bytes field of the batch did not fit its region; needed_bytes holds the bytes the
// largest such field needed, and the consumer reads the batch itself (docs/shm-layout.md).
enum class SlotStatus : std::uint32_t { empty = 0, ok = 1, error = 2, too_large = 3 };

struct SlotHeader {
  std::uint64_t task_id;
  std::uint64_t epoch;
  std::uint64_t batch_index;
  std::uint32_t num_samples;
  std::uint32_t status;  // SlotStatus
  std::uint32_t worker;
  std::uint32_t error_bytes;   // error: its text; ok or too_large: the skipped samples' notes
  std::uint64_t busy_ns;       // time the worker spent filling this slot
  std::uint64_t needed_bytes;  // too_large: what the field that did not fit needed
  std::uint32_t error_code;    // error: the stoker::ErrorCode of the error text
  std::uint32_t shard_opens;   // shard files the worker opened since its last slot (Stats::shard_opens)
};
static_assert(sizeof(SlotHeader) == 64);

// A single-producer single-consumer ring of slot numbers. write and read are monotonic counters
// on their own cache lines; the producer publishes an item with a release store of write, the
// consumer frees its place with a release store of read. Full when write - read == capacity.
class SlotRing {
 public:
  SlotRing() = default;
  // `counters`: two cache lines (write, read); `items`: capacity words.
  SlotRing(std::byte* counters, std::byte* items, std::uint32_t capacity) noexcept;
  // Constructs the counters in place; once, before any process uses the ring.
  void initialize() noexcept;

  bool push(std::uint32_t value) noexcept;  // producer only
  bool pop(std::uint32_t& value) noexcept;  // consumer only
  // Consumer only: the items pushed but not yet popped are at positions [read_position(),
  // write_position()); item_at() reads one of them without popping it.
  std::uint64_t read_position() const noexcept { return read_->load(std::memory_order_relaxed); }
  std::uint64_t write_position() const noexcept { return write_->load(std::memory_order_acquire); }
  std::uint32_t item_at(std::uint64_t position) const noexcept { return items_[position % capacity_]; }
  // Producer only, and only while no consumer exists (its process died): empties the ring.
  void clear_from_producer() noexcept {
    read_->store(write_->load(std::memory_order_relaxed), std::memory_order_release);
  }

 private:
  std::atomic<std::uint64_t>* write_ = nullptr;
  std::atomic<std::uint64_t>* read_ = nullptr;
  std::uint32_t* items_ = nullptr;
  std::uint32_t capacity_ = 0;
};

// The rings between the consumer and one worker, and that worker's counters.
struct WorkerChannel {
  SlotRing tasks;                                // consumer -> worker
  SlotRing done;                                 // worker -> consumer
  std::atomic<std::uint64_t>* cpu_ns = nullptr;  // the worker's CPU time, updated after each task
  // Bumped by the worker at each step of a batch (taken, read, each sample through its pipeline,
  // done): the consumer tells a stuck worker from a slow one by it (loader/source/progress_watch.h).
  std::atomic<std::uint64_t>* progress = nullptr;
  // The index of the sample the worker is running a pipeline or transform on, plus one; 0 while it
  // reads a batch or waits. Read by the consumer when a worker dies, to name the sample that killed
  // it. In progress's cache line: both are written by the worker alone.
  std::atomic<std::uint64_t>* sample = nullptr;
  // 1 while the worker sleeps (or is about to) on its task eventfd, 0 while it works: the consumer
  // writes the eventfd after a push only to a worker that sleeps. The worker stores it, then looks
  // at its task ring; the consumer pushes, then loads it: each with a seq_cst fence between, so
  // that the worker sees the task or the consumer sees it sleeps. In progress's cache line.
  std::atomic<std::uint64_t>* idle = nullptr;
};

// The bytes a slot gives each sample of a bytes field (the `sample_bound` of SegmentLayout): twice
// the largest of the few samples the loader looked at (`typical`), at least 4 KiB, so that a typical
// batch fits and a batch holding an outlier takes the overflow path (docs/shm-layout.md); never
// more than the field's largest sample when the format records it exactly (`bound`); and never so
// much that a batch's region could hold more than the dataset's `file_bytes` on disk (no batch of
// distinct samples does: a damaged file that claims a huge value reserves nothing for it). A
// file_bytes of 0 (unknown) sets no limit.
std::uint64_t slot_bytes_per_sample(std::uint64_t typical, std::uint64_t bound, bool exact, std::uint64_t file_bytes,
                                    std::size_t batch_size) noexcept;

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
  // is checked before it is used (loader/source/slot_check.h, loader/workers/overflow_read.h).
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
