// A batch too large for its slot (docs/shm-layout.md) is read again for the consumer, and never in
// the training process when workers exist: the file may be damaged or crafted, and neither HDF5
// nor LMDB survives every such file. The read runs in a child forked for it, which writes the fixed
// fields into the slot (the ring's mapping is shared with it) and sends the bytes fields back over
// a socket; the consumer checks what it receives (one part per field, offsets that start at 0, rise
// and end at the data's size) before anything points into it. The child's death or silence past
// the timeout is an error naming the batch and the file: the training process is unharmed.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "loader/shm/segment_layout.h"
#include "loader/shm/slot_pool.h"
#include "loader/workers/batch_filler.h"

namespace stoker::detail {

// Reads too_large slot `s` of `view` (a batch of `num_fields` fields) with `filler` in a forked
// child, as BatchFiller::fill_overflow does in-process. `path` names the dataset in errors; a
// `timeout` of zero sets no limit. Throws stoker::Error.
OutsideBytes read_overflow_in_child(BatchFiller& filler, const SegmentView& view, std::uint32_t s,
                                    std::size_t num_fields, const std::string& path, std::chrono::milliseconds timeout);

}  // namespace stoker::detail
