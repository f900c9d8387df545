// ShardedReader: a shard set (formats/shard_set.h) read as one dataset. Sample i of the set is
// sample i - start(k) of shard k, the shards' samples concatenated in order. Every shard must
// have the same fields (names, kinds, dtypes, shapes); one that differs is an error naming it and
// the difference.
//
// Shards are opened when first read and at most ReaderOptions::max_open_shards are kept open
// (the least recently read is closed first), so that a set of 10 000 shards never exhausts file
// descriptors or address space. Constructed without the shards' sample counts (the probe), it
// opens every shard once to learn them and check their fields; with them (ReaderOptions::
// shard_samples, as the probe found them: a worker), it opens the first shard only, and checks
// each other one when it first opens it. Every open of a shard also checks its identity (one
// stat: formats/core/file_identity.h) against the one recorded when the set was first read (by
// the probe: ReaderOptions::shard_identities; else by this reader, at its first open of the
// shard): a shard replaced or written since is an error naming it, never samples of two versions
// of the set in one epoch. Not thread-safe: one per process, as readers are.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "formats/core/file_identity.h"
#include "formats/core/reader.h"

namespace stoker::formats {

class ShardedReader final : public Reader {
 public:
  ShardedReader(std::vector<std::string> shards, const ReaderOptions& options);

  using Reader::read;
  const Schema& schema() const override { return schema_; }
  void read(std::span<const std::uint64_t> indices, std::span<const FieldOut> out) override;
  // The largest of the shards' bounds (known for the shards read at construction: all of them
  // without shard_samples, else the first).
  SampleBound sample_bound(std::size_t f) const override;
  std::string describe_layout() const override;
  std::uint64_t locality_rows() const override { return locality_rows_; }
  void will_need(std::span<const std::uint64_t> indices) noexcept override;
  // The first shard's: a set's shards are written with the same (stoker-pack, h5-to-lmdb).
  std::map<std::string, std::string> metadata() override { return shard(0).metadata(); }

  // Samples per shard, in order.
  const std::vector<std::uint64_t>& shard_samples() const noexcept { return samples_; }
  // Each shard's identity when it was first read (unset: never opened, or it could not be
  // stat'ed), for ReaderOptions::shard_identities.
  const std::vector<std::optional<FileIdentity>>& shard_identities() const noexcept { return seen_; }
  // Shards opened so far (again after being closed included).
  std::uint64_t shard_opens() const noexcept override { return opens_; }

 private:
  // Shard k, open (opening it, and closing the least recently read, when it is not).
  Reader& shard(std::size_t k);
  std::unique_ptr<Reader> open_shard(std::size_t k);
  std::size_t shard_of(std::uint64_t index) const noexcept;
  // Closes the open shards whose file was deleted or replaced since they were opened (a remote
  // set's cached shard evicted: the space of a deleted file returns only once it is closed).
  void close_evicted();
  // Calls visit(shard, position of the run's first index, the run's indices within the shard) for
  // each maximal run of consecutive `indices` in one shard, in order. REQUIRES: every index < the
  // set's samples.
  template <class Visit>
  void for_each_run(std::span<const std::uint64_t> indices, Visit visit);

  std::vector<std::string> paths_;
  ReaderOptions options_;  // per shard: known and shard_samples unset
  std::size_t max_open_;
  std::vector<std::uint64_t> samples_, starts_;  // starts_: prefix sums, paths_.size() + 1
  Schema schema_;                                // shard 0's fields, the set's num_samples
  std::vector<SampleBound> bounds_;
  std::uint64_t locality_rows_ = 1;
  std::string layout_;
  std::list<std::pair<std::size_t, std::unique_ptr<Reader>>> open_;  // most recently read first
  std::uint64_t opens_ = 0;
  bool counts_known_ = false;  // samples_ holds every shard's count (after construction)
  // Each shard as the set was first read (by the probe, or by this reader): a shard opened again,
  // or for the first time here, must be the same file, unwritten (its device, inode, size,
  // modification time and Reader::version()), or its samples would be another version's.
  std::vector<std::optional<FileIdentity>> seen_;
  std::vector<std::uint64_t> open_inode_;  // per shard: the inode of its open file
  // Shard 0's fields and count as the loader's process found them, for its first open (taken).
  std::optional<Schema> first_known_;
  std::vector<std::uint64_t> local_;  // scratch: one run's indices within its shard (for_each_run)
};

}  // namespace stoker::formats
