#include "loader/producers/held_batches.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "loader/batch/kept_batches.h"

namespace stoker::detail {

Error held_batches_error(const SlotPool& slots, std::uint64_t epoch) {
  return Error(
      ErrorCode::slots_held,
      fmt::format("stoker: all {} batch slots are held by {} (batches {} of epoch {}), so no batch can be "
                  "loaded: {}",
                  slots.num_slots(), kept_batches(), fmt::join(slots.held_batches(), ", "), epoch, let_batches_go()));
}

}  // namespace stoker::detail
