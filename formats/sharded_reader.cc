#include "formats/sharded_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "base/progress_note.h"
#include "formats/open_reader.h"
#include "stoker/error.h"

namespace stoker::formats {

ShardedReader::ShardedReader(std::vector<std::string> shards, const ReaderOptions& options)
    : paths_(std::move(shards)), options_(options), max_open_(std::max<std::size_t>(options.max_open_shards, 1)) {
  options_.known.reset();
  options_.shard_samples.clear();
  options_.shard_identities.clear();
  const bool counted = !options.shard_samples.empty();
  // With the counts, the set's fields (options.known) are shard 0's: it is not scanned either.
  if (counted && options.known) {
    first_known_ = options.known;
    first_known_->num_samples = options.shard_samples[0];
  }
  if (counted && options.shard_samples.size() != paths_.size()) {
    throw Error(ErrorCode::internal,
                fmt::format("{} shard counts for {} shards", options.shard_samples.size(), paths_.size()));
  }
  if (!options.shard_identities.empty() && options.shard_identities.size() != paths_.size()) {
    throw Error(ErrorCode::internal,
                fmt::format("{} shard identities for {} shards", options.shard_identities.size(), paths_.size()));
  }
  seen_ = options.shard_identities;
  seen_.resize(paths_.size());
  open_inode_.assign(paths_.size(), 0);
  samples_.assign(paths_.size(), 0);
  const bool lazily = counted && options.known && options.open_shards_lazily;
  if (lazily) {  // the set's fields as the loader found them; bounds and layout unknown here
    schema_ = *options.known;
    bounds_.assign(schema_.fields.size(), SampleBound{});
  }
  // Shard 0 gives the fields; without counts, every other shard is opened once to count its
  // samples and check its fields (one at a time: none stays open but the last few).
  for (std::size_t k = 0; k < (lazily ? 0 : counted ? 1 : paths_.size()); ++k) {
    Reader& r = shard(k);
    if (k == 0) {
      schema_ = r.schema();
      bounds_.assign(schema_.fields.size(), SampleBound{});
      locality_rows_ = r.locality_rows();
      layout_ = r.describe_layout();
    }
    samples_[k] = r.schema().num_samples;
    for (std::size_t f = 0; f < schema_.fields.size(); ++f) {
      if (!schema_.fields[f].is_bytes()) continue;
      const SampleBound b = r.sample_bound(f);
      bounds_[f].bytes = std::max(bounds_[f].bytes, b.bytes);
      bounds_[f].exact = (k == 0 || bounds_[f].exact) && b.exact;
    }
    detail::note_progress();  // a set of thousands of shards takes its time (base/progress_note.h)
  }
  if (counted) {
    if (!lazily && samples_[0] != options.shard_samples[0]) {
      throw Error(ErrorCode::dataset, fmt::format("{}: shard 0 holds {} samples, and held {} when the loader opened "
                                                  "it: the dataset changed",
                                                  paths_[0], samples_[0], options.shard_samples[0]));
    }
    samples_ = options.shard_samples;
    // The bounds are the first shard's alone: not exact for the set.
    for (auto& b : bounds_) b.exact = b.exact && paths_.size() == 1;
  }
  counts_known_ = true;  // from here on, every shard opened again is checked against its count
  starts_.assign(paths_.size() + 1, 0);
  for (std::size_t k = 0; k < paths_.size(); ++k) {
    if (samples_[k] > ~std::uint64_t{0} - starts_[k]) {
      throw Error(ErrorCode::dataset, fmt::format("{}: the shards hold more than 2^64 samples", paths_[k]));
    }
    starts_[k + 1] = starts_[k] + samples_[k];
  }
  schema_.num_samples = starts_.back();
}

std::unique_ptr<Reader> ShardedReader::open_shard(std::size_t k) {
  // Once the counts are known, a shard opened again is not scanned again (an LMDB without a stoker
  // schema walks its keys when it opens without one): its fields are the set's, its count known.
  std::unique_ptr<Reader> r;
  if (counts_known_) {
    ReaderOptions again = options_;
    again.known = schema_;
    again.known->num_samples = samples_[k];
    r = open_reader(paths_[k], again);
  } else if (k == 0 && first_known_) {
    ReaderOptions first = options_;
    first.known = std::exchange(first_known_, std::nullopt);
    r = open_reader(paths_[k], first);
  } else {
    r = open_reader(paths_[k], options_);
  }
  ++opens_;
  const Schema& s = r->schema();
  // Shard 0 sets the fields (schema_ is empty until it is open); every later open is checked.
  if (!schema_.fields.empty() && s.fields != schema_.fields) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: shard {} of {} has fields {}, and {} (the first shard) has {}: every shard of a "
                            "dataset must have the same fields",
                            paths_[k], k, paths_.size(), s.describe_fields(), paths_[0], schema_.describe_fields()));
  }
  if (counts_known_ && s.num_samples != samples_[k]) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: shard {} holds {} samples, and held {} when the loader opened it: the dataset changed",
                            paths_[k], k, s.num_samples, samples_[k]));
  }
  // Checked once the shard is open (its fields and count first: their difference says most), so
  // the open file is the one compared, whatever happens to the path after.
  std::optional<FileIdentity> now = file_identity(paths_[k]);
  if (now) {
    now->version = r->version();
    if (seen_[k] && !seen_[k]->matches(*now)) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: shard {} of {} was replaced or written since the set was first read ({}): its "
                              "samples are not mixed into this loader's epochs; build a new Loader to read the new set",
                              paths_[k], k, paths_.size(), describe_change(*seen_[k], *now)));
    }
    if (!seen_[k] || !seen_[k]->by_content()) seen_[k] = now;
    open_inode_[k] = now->inode;
  }
  return r;
}

Reader& ShardedReader::shard(std::size_t k) {
  for (auto it = open_.begin(); it != open_.end(); ++it) {
    if (it->first == k) {
      if (it != open_.begin()) open_.splice(open_.begin(), open_, it);
      return *open_.front().second;
    }
  }
  if (open_.size() >= max_open_) open_.pop_back();  // closed before the next is opened
  open_.emplace_front(k, open_shard(k));
  return *open_.front().second;
}

void ShardedReader::close_evicted() {
  open_.remove_if([&](const auto& open) {
    const std::optional<FileIdentity> now = file_identity(paths_[open.first]);
    return !now || now->inode != open_inode_[open.first];
  });
}

std::size_t ShardedReader::shard_of(std::uint64_t index) const noexcept {
  // The last shard whose start is at most index (empty shards start where the next one does).
  const auto it = std::upper_bound(starts_.begin(), starts_.end() - 1, index);
  return static_cast<std::size_t>(it - starts_.begin()) - 1;
}

template <class Visit>
void ShardedReader::for_each_run(std::span<const std::uint64_t> indices, Visit visit) {
  std::size_t i = 0;
  while (i < indices.size()) {
    const std::size_t k = shard_of(indices[i]);
    const std::uint64_t lo = starts_[k], hi = starts_[k + 1];
    std::size_t j = i;
    local_.clear();
    while (j < indices.size() && indices[j] >= lo && indices[j] < hi) local_.push_back(indices[j++] - lo);
    visit(k, i, std::span<const std::uint64_t>(local_));
    i = j;
  }
}

void ShardedReader::read(std::span<const std::uint64_t> indices, std::span<const FieldOut> out) {
  for (std::uint64_t i : indices) {
    if (i >= starts_.back()) {
      throw Error(ErrorCode::internal, fmt::format("{} .. {}: sample {} of a shard set of {}", paths_.front(),
                                                   paths_.back(), i, starts_.back()));
    }
  }
  if (options_.open_shards_lazily) close_evicted();
  std::vector<FieldOut> part(out.begin(), out.end());
  for_each_run(indices, [&](std::size_t k, std::size_t first, std::span<const std::uint64_t> local) {
    for (std::size_t f = 0; f < out.size(); ++f) {
      if (out[f].fixed) part[f].fixed = out[f].fixed + first * schema_.fields[f].bytes_per_sample();
    }
    shard(k).read(local, part);
  });
}

SampleBound ShardedReader::sample_bound(std::size_t f) const { return bounds_[f]; }

std::string ShardedReader::describe_layout() const {
  const std::string shards = fmt::format("{} shards, {} .. {}", paths_.size(), paths_.front(), paths_.back());
  return layout_.empty() ? shards : fmt::format("{}; {}", shards, layout_);
}

void ShardedReader::will_need(std::span<const std::uint64_t> indices) noexcept {
  // Only for shards open now: opening one for a hint would cost what the hint saves.
  if (std::any_of(indices.begin(), indices.end(), [&](std::uint64_t i) { return i >= starts_.back(); })) return;
  try {
    for_each_run(indices, [&](std::size_t k, std::size_t, std::span<const std::uint64_t> local) {
      for (auto& [n, r] : open_) {
        if (n == k) r->will_need(local);
      }
    });
  } catch (...) {
    // A hint: nothing is lost without it.
  }
}

}  // namespace stoker::formats
