// A mix's sources (Options::mix) as the probe found them: each one's samples, from the shards it
// resolved to, checked, and the table of the mix's draws (loader/plan/mix_order.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "loader/plan/mix_order.h"
#include "stoker/options.h"

namespace stoker::detail {

// Each source's samples. `resolved`: Options::mix with each path resolved (formats/shard_set.h);
// `shard_samples`: the samples of each shard of their concatenation (empty for one file, which
// then holds `total`). Throws stoker::Error (ErrorCode::dataset) for a source without samples,
// naming it.
std::vector<std::uint64_t> mix_source_samples(const std::vector<Source>& resolved,
                                              const std::vector<std::uint64_t>& shard_samples, std::uint64_t total);

// The mix's table for `order` (random or sequential) and `seed`.
std::shared_ptr<const MixTable> make_mix_table(const std::vector<Source>& resolved,
                                               const std::vector<std::uint64_t>& shard_samples, std::uint64_t total,
                                               Order order, std::uint64_t seed);

}  // namespace stoker::detail
