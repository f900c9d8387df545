// The structs a loader's shared-memory segment is made of, as they lie in memory (docs/shm-layout.md;
// where they lie: loader/shm/segment_layout.h): its header, a field's layout, a slot's header, and
// the constants of the format. A change here is a change of kSegmentVersion.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::detail {

inline constexpr char kSegmentMagic[8] = {'S', 'T', 'O', 'K', 'E', 'R', 'S', 'M'};
inline constexpr std::uint32_t kSegmentVersion = 6;
inline constexpr std::size_t kErrorTextBytes = 4096;
// The stage times of a slot: the nanoseconds its worker spent in each stage of the batch
// (loader/worker/stage_times.h), the last entry holding the stages past it.
inline constexpr std::size_t kStageSlots = 32;
inline constexpr std::uint32_t kStopWorker = 0xffffffffu;  // task ring sentinel: exit

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

}  // namespace stoker::detail
