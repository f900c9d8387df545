// How many bytes a slot gives each sample of a bytes field.
#pragma once

#include <cstddef>
#include <cstdint>

namespace stoker::detail {

// The bytes a slot gives each sample of a bytes field (the `sample_bound` of SegmentLayout): twice
// the largest of the few samples the loader looked at (`typical`), at least 4 KiB, so that a typical
// batch fits and a batch holding an outlier takes the overflow path (docs/shm-layout.md); never
// more than the field's largest sample when the format records it exactly (`bound`); and never so
// much that a batch's region could hold more than the dataset's `file_bytes` on disk (no batch of
// distinct samples does: a damaged file that claims a huge value reserves nothing for it). A
// file_bytes of 0 (unknown) sets no limit.
std::uint64_t slot_bytes_per_sample(std::uint64_t typical, std::uint64_t bound, bool exact, std::uint64_t file_bytes,
                                    std::size_t batch_size) noexcept;

}  // namespace stoker::detail
