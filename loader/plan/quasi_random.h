// The quasi-random order (FFCV's "quasi-random" idea): a shuffle that keeps locality, so that data
// stored in chunks (gzip-compressed HDF5 above all) is read and inflated about once per epoch
// instead of once per sample, while batches stay well mixed.
//
// With N samples, group size G (the rows of one HDF5 chunk of the dominant field, or of about 64
// KiB of records for LMDB and contiguous data: docs/sampler.md) and a window of K groups:
//   1. group g holds samples [g·G, min((g+1)·G, N)); the groups are shuffled;
//   2. the shuffled groups are taken K at a time (the last window may hold fewer), and the samples
//      of each window are shuffled among themselves;
//   3. the windows' samples, in window order, are the epoch's order.
// For a shard set, groups never straddle two shards (each shard's groups start at its first
// sample), and shards are interleaved a few at a time: the shards are shuffled and taken
// kQuasiRandomInterleavedShards at a time, and steps 1-3 run over each such block of shards in
// turn. A cold epoch then has a few shards in use at any time, each read through once, instead of
// every shard touched all epoch long. One file is one block of one shard.
//
// Every sample exactly once; a pure function of (the shards' sizes, G, K, seed, epoch), like the
// random order, computed per position (both shuffles are FeistelPermutations): memory is a few
// words per shard, none per sample. Immutable values sharing their table; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "loader/plan/shuffle.h"

namespace stoker::detail {

inline constexpr std::uint32_t kQuasiRandomWindowGroups = 4;
inline constexpr std::uint32_t kQuasiRandomInterleavedShards = 8;

class QuasiRandomOrder {
 public:
  QuasiRandomOrder() = default;  // n = 0
  // `shard_samples`: the samples of each shard of a shard set, in order, summing to n; empty (or
  // one entry) for one file. Throws std::bad_alloc only (a table of a few words per shard).
  QuasiRandomOrder(std::uint64_t n, std::uint64_t group, std::uint32_t window_groups, std::uint64_t seed,
                   std::uint64_t epoch, std::span<const std::uint64_t> shard_samples = {});

  // The sample at position pos of the epoch. REQUIRES: pos < n.
  std::uint64_t operator()(std::uint64_t pos) const noexcept;

 private:
  struct Member {                // a shard of a block
    std::uint64_t first_sample;  // its first sample's index in the dataset
    std::uint64_t samples;
    std::uint64_t first_group;  // the block's listed group its first group is
  };
  struct ShortGroup {       // a shard's last group, when G does not divide the shard's samples
    std::uint64_t window;   // the window of the block that holds it
    std::uint64_t deficit;  // G - its size
  };
  struct Block {
    std::uint64_t first_position;  // of the epoch: where the block's samples start
    std::uint64_t first_window;    // the epoch's number of the block's first window
    std::uint64_t num_groups;
    FeistelPermutation groups;  // shuffled position in the block -> listed group
    std::size_t first_member = 0, num_members = 0;
    std::size_t first_short = 0, num_short = 0;  // its short groups, sorted by window
  };
  struct Table {
    std::vector<Block> blocks;
    std::vector<Member> members;
    std::vector<ShortGroup> shorts;
  };

  // Samples of the windows of block b before window w (w ≤ the block's windows).
  std::uint64_t window_start(const Block& b, std::uint64_t w) const noexcept;

  std::uint64_t group_ = 1;
  std::uint64_t window_groups_ = 1;
  std::uint64_t seed_ = 0;  // t of docs/sampler.md
  std::uint64_t epoch_ = 0;
  std::shared_ptr<const Table> table_;
};

// The whole order, for tests and small tools.
std::vector<std::uint64_t> quasi_random_order(std::uint64_t n, std::uint64_t group, std::uint32_t window_groups,
                                              std::uint64_t seed, std::uint64_t epoch,
                                              std::span<const std::uint64_t> shard_samples = {});

}  // namespace stoker::detail
