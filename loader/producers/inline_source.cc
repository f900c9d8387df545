#include "loader/producers/inline_source.h"

#include "loader/producers/held_batches.h"
#include "loader/producers/slot_task.h"

namespace stoker::detail {

std::uint32_t InlineSource::next_filled() {
  if (gate_) gate_->wait_ready(next_, std::chrono::steady_clock::time_point::max());
  auto s = slots_->acquire();
  if (!s) throw held_batches_error(*slots_, plan_->epoch);
  write_task(slots_->view(), *s, *plan_, next_++);
  filler_.fill(slots_->view(), *s, "stoker");
  return *s;
}

}  // namespace stoker::detail
