// A batch too large for its slot (docs/shm-layout.md) is read again for the consumer, and never in
// the training process when workers exist: the file may be damaged or crafted, and neither HDF5
// nor LMDB survives every such file. The read runs in a child forked for it, which writes the fixed
// fields into the slot (the ring's mapping is shared with it) and sends the bytes fields back over
// a socket: first each field's sizes, then the offsets, then the data. The consumer checks what it
// receives (a part for each bytes field of the batch and none for a fixed one, offsets that start at
// 0, rise and end at the data's size) and counts the data against the batch's bound before it
// takes any memory for it; then it reads the data once, into one buffer of exactly its size. The
// child's death or silence past the timeout is an error naming the batch and the file: the
// training process is unharmed.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "loader/shm/segment_layout.h"
#include "loader/shm/shm_budget.h"
#include "loader/shm/slot_pool.h"
#include "loader/worker/batch_filler.h"
#include "stoker/schema.h"

namespace stoker::detail {

// The most the samples' bytes of one batch read again may take in the training process, and what
// sets it, for the refusal's words.
struct OverflowBound {
  std::uint64_t bytes = UINT64_MAX;
  std::string what;    // "the dataset's size on disk, 1.2 MiB"
  std::string advice;  // what the user can do
};

// The bound of docs/shm-layout.md: the smaller of the dataset's size on disk (`file_bytes`, 0 when
// unknown: no batch of distinct samples, stored as they are delivered, holds more) and half the
// memory this process may still take (the smaller of MemAvailable and the memory cgroup's
// headroom, read now from `env`) shared among the `local_ranks` loaders on this node.
OverflowBound overflow_bound(std::uint64_t file_bytes, std::uint32_t local_ranks, const ShmEnvironment& env = {});

// Throws stoker::Error (ErrorCode::dataset) when the samples' bytes of the bytes fields of
// `fields` (one per field of `delivered`, their offsets; the data is not read) are more than
// `bound`, naming `what` (the batch), each bytes field's size and largest sample (by its index in
// `indices`), the bound and what to do.
void check_overflow_bound(std::span<const OutsideBytes::Field> fields, const Schema& delivered,
                          std::span<const std::uint64_t> indices, const OverflowBound& bound, const std::string& what);

// "" when the child that read slot s again left it the task it was given (`before`, `indices`: the
// slot's header and sample indices when the child was forked) and wrote a well-formed skipped
// samples' record (SegmentView::check_skipped), else what is wrong. The child shares the slot's
// memory: what it wrote there is checked as a worker's slot is (loader/producers/slot_check.h).
std::string check_slot_read_again(const SegmentView& view, std::uint32_t s, const SlotHeader& before,
                                  std::span<const std::uint64_t> indices);

// "PATH: batch B of epoch E, too large for its slot and read again": how errors name such a batch.
std::string overflow_batch_name(const std::string& path, const SlotHeader& h);

// Reads too_large slot `s` of `view` (a batch of the fields of `delivered`, the schema the slots
// hold) with `filler` in a forked child, as BatchFiller::fill_overflow does in-process. `path`
// names the dataset in errors; a `timeout` of zero sets no limit. Throws stoker::Error, the refusal
// of check_overflow_bound() included (then the child is killed, and no memory is taken for the data),
// and ErrorCode::internal for a malformed answer: one the socket carries, or a slot the child left
// otherwise than check_slot_read_again() wants.
OutsideBytes read_overflow_in_child(BatchFiller& filler, const SegmentView& view, std::uint32_t s,
                                    const Schema& delivered, const OverflowBound& bound, const std::string& path,
                                    std::chrono::milliseconds timeout);

// The same in this process, for a loader without workers (which parses the file itself): the bytes
// fields are read into the filler's growing buffers, then counted against `bound`.
OutsideBytes read_overflow_here(BatchFiller& filler, const SegmentView& view, std::uint32_t s, const Schema& delivered,
                                const OverflowBound& bound, const std::string& path);

}  // namespace stoker::detail
