#include "loader/resume_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <vector>

#include "stoker/error.h"
#include "stoker/option_values.h"

namespace stoker::detail {

void check_resumable(const LoaderState& state, const LoaderState& here) {
  std::vector<std::string> differ;
  if (state.num_samples != here.num_samples) {
    differ.push_back(fmt::format("num_samples {} in the state, {} here", state.num_samples, here.num_samples));
  }
  if (state.fields != here.fields) {
    differ.push_back(fmt::format("fields '{}' in the state, '{}' here", state.fields, here.fields));
  }
  if (state.shards != here.shards) {
    differ.push_back(fmt::format("shards '{}' in the state, '{}' here", state.shards.empty() ? "none" : state.shards,
                                 here.shards.empty() ? "none" : here.shards));
  }
  if (state.order != here.order) {
    differ.push_back(fmt::format("order {} in the state, {} here", state.order, here.order));
  }
  // A sequential order, a mix's included, does not depend on the seed.
  const bool seeded = state.order != name(Order::sequential) && !state.order.starts_with("mix(sequential;");
  if (seeded && state.seed != here.seed) {
    differ.push_back(fmt::format("seed {} in the state, {} here", state.seed, here.seed));
  }
  if (!differ.empty()) {
    throw Error(ErrorCode::state_mismatch,
                fmt::format("stoker: the loader state is not for this loader ({}): it would resume another order",
                            fmt::join(differ, "; ")));
  }
  if (state.epoch_finished || state.consumed >= state.num_samples) {
    throw Error(ErrorCode::state_mismatch,
                fmt::format("stoker: the loader state's epoch {} is finished (all its batches were delivered): start "
                            "epoch {} instead of resuming",
                            state.epoch, state.epoch + 1));
  }
}

}  // namespace stoker::detail
