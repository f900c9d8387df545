#include "loader/shm/sample_bytes.h"

#include <algorithm>

#include "stoker/schema.h"

namespace stoker::detail {

std::uint64_t slot_bytes_per_sample(std::uint64_t typical, std::uint64_t bound, bool exact, std::uint64_t file_bytes,
                                    std::size_t batch_size) noexcept {
  constexpr std::uint64_t kLeast = 4096;
  std::uint64_t b = std::max(typical > UINT64_MAX / 2 ? UINT64_MAX : 2 * typical, kLeast);
  if (exact) b = std::min(b, std::max<std::uint64_t>(bound, 1));
  if (file_bytes > 0 && batch_size > 0) {
    const std::uint64_t share = file_bytes / batch_size + (file_bytes % batch_size != 0);
    b = std::min(b, std::max<std::uint64_t>(share, 1));
  }
  return std::min<std::uint64_t>(b, kMaxSampleBytes);
}

}  // namespace stoker::detail
