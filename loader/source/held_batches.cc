#include "loader/source/held_batches.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "loader/base/option_spelling.h"

namespace stoker::detail {

Error held_batches_error(const SlotPool& slots, std::uint64_t epoch) {
  return Error(
      ErrorCode::slots_held,
      fmt::format("stoker: all {} batch slots are held by live stoker::Batch objects (batches {} of epoch {}), so no "
                  "batch can be "
                  "loaded: destroy or release() the batches you no longer need, copy what you want to keep, or raise "
                  "{}",
                  slots.num_slots(), fmt::join(slots.held_batches(), ", "), epoch, option_name("prefetch")));
}

}  // namespace stoker::detail
