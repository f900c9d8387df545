#include "loader/mix_sources.h"

#include <fmt/format.h>

#include "base/option_spelling.h"
#include "formats/shard_set.h"
#include "stoker/error.h"

namespace stoker::detail {

std::vector<std::uint64_t> mix_source_samples(const std::vector<Source>& resolved,
                                              const std::vector<std::uint64_t>& shard_samples, std::uint64_t total) {
  std::vector<std::uint64_t> samples;
  std::size_t shard = 0;
  for (std::size_t s = 0; s < resolved.size(); ++s) {
    const std::size_t shards = formats::shard_paths(resolved[s].path).size();
    std::uint64_t n = 0;
    if (shard_samples.empty()) {
      n = total;  // one source of one file
    } else {
      for (std::size_t k = 0; k < shards && shard < shard_samples.size(); ++k) n += shard_samples[shard++];
    }
    if (n == 0) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{} ('{}') has no samples: every source of a mix is drawn from; leave it out",
                              option_entry("mix", s), printable(formats::source_name(resolved[s].path))));
    }
    samples.push_back(n);
  }
  // Every shard the probe counted belongs to one source: anything else would shift the sources.
  if (!shard_samples.empty() && shard != shard_samples.size()) {
    throw Error(ErrorCode::internal, fmt::format("a mix's {} sources name {} shards, and the probe counted {}",
                                                 resolved.size(), shard, shard_samples.size()));
  }
  return samples;
}

std::shared_ptr<const MixTable> make_mix_table(const std::vector<Source>& resolved,
                                               const std::vector<std::uint64_t>& shard_samples, std::uint64_t total,
                                               Order order, std::uint64_t seed) {
  return std::make_shared<const MixTable>(mix_weights(resolved), mix_source_samples(resolved, shard_samples, total),
                                          order, seed);
}

}  // namespace stoker::detail
