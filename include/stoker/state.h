// stoker/state.h: where a Loader is in an epoch, to checkpoint with the model and resume exactly.
//
// The epoch's global order is the permutation of all N samples (docs/sampler.md) before it is
// cut into ranks' shards. `consumed` counts the samples of a prefix of that order that have been
// delivered by all ranks together. Every rank that has delivered the same number of batches has
// the same state, so any rank may save it. Resuming (Loader::epoch(state)) delivers the rest of the
// order, positions [consumed, N), once across the new set of ranks, whatever their number, batch
// size or worker count (sharded like DistributedSampler, padded when drop_last is off).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/export.h"

namespace stoker {

struct STOKER_API LoaderState {
  std::uint64_t epoch = 0;
  std::uint64_t consumed = 0;   // samples of the epoch's global order delivered, as a prefix
  bool epoch_finished = false;  // every batch of the epoch was delivered: resume the next one
  // What the order depends on: a state only resumes a loader that agrees on all of them.
  std::uint64_t seed = 0;
  std::string order;  // "sequential", "random", "quasi_random(group=G,window=K)"
  std::uint64_t num_samples = 0;
  std::string fields;  // the delivered fields, "image: u8[3,32,32], label: i64[]"
  // A shard set's identity: "16 shards 5c0e...": how many, and XXH64 of their file names (not
  // their directories: a copied dataset resumes) with each one's sample count. "" for one file.
  std::string shards;
  // A mix's position in each source (Options::mix, in its order): the samples drawn from it before
  // this state, since the first epoch; its current pass is drawn / its samples. Empty without a mix.
  std::vector<std::uint64_t> drawn;

  // One JSON object, with a fingerprint of its contents (docs/sampler.md).
  std::string to_json() const;
  // Throws stoker::Error for text that is not such an object, lacks a key, or was edited (its
  // fingerprint does not match).
  static LoaderState from_json(std::string_view text);

  bool operator==(const LoaderState&) const = default;
};

}  // namespace stoker
