// Readers: read the samples of one batch from a dataset into caller-provided arrays.
//
// A Reader is opened in the process that uses it (a worker opens its own after fork) and used by
// one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/scratch.h"
#include "formats/core/file_identity.h"
#include "stoker/export.h"
#include "stoker/options.h"
#include "stoker/schema.h"

namespace stoker::formats {

// One bytes field of a batch as it is read: sample k is data()[offset(k), offset(k + 1)). The
// memory is kept between batches (clear() keeps the capacity), so a warm reader allocates nothing.
// clear_into() lends it a caller's buffer instead (a slot's region): the bytes are read straight
// there while they fit, and move to memory of its own, with what was written so far, when not.
class STOKER_TOOLS_API VarBytes {
 public:
  // Empties it for the next batch; a buffer an outlier grew is given back once a batch after it
  // used little of it (base/scratch.h).
  void clear() noexcept {
    if (base_ == owned_.get() && detail::scratch_is_outlier(owned_capacity_, size_)) {
      owned_.reset();
      owned_capacity_ = 0;
    }
    clear_into(owned_.get(), owned_capacity_);
  }
  void clear_into(std::byte* buffer, std::size_t capacity) noexcept {
    base_ = buffer;
    capacity_ = capacity;
    size_ = 0;
    offsets_.assign(1, 0);
  }
  // Whether the bytes are (still) in `buffer`, the one clear_into() lent.
  bool writes_into(const std::byte* buffer) const noexcept { return base_ == buffer; }
  // Appends a sample of n bytes and returns where to write them.
  std::byte* append(std::size_t n);
  std::size_t samples() const noexcept { return offsets_.size() - 1; }
  std::size_t total() const noexcept { return size_; }
  const std::byte* data() const noexcept { return base_; }
  std::uint64_t offset(std::size_t k) const noexcept { return offsets_[k]; }
  std::span<const std::uint64_t> offsets() const noexcept { return offsets_; }
  std::span<const std::byte> sample(std::size_t k) const noexcept {
    return {base_ + offsets_[k], static_cast<std::size_t>(offsets_[k + 1] - offsets_[k])};
  }
  // Drops the last sample (a read that failed half-way).
  void pop_back() noexcept {
    offsets_.pop_back();
    size_ = offsets_.back();
  }

 private:
  std::unique_ptr<std::byte[]> owned_;  // not a vector: growing must not zero-fill
  std::size_t owned_capacity_ = 0;
  std::byte* base_ = nullptr;  // owned_, or the buffer clear_into() lent
  std::size_t size_ = 0, capacity_ = 0;
  std::vector<std::uint64_t> offsets_{0};
};

// Where one field of a batch goes: `fixed` for a fixed field (B * bytes_per_sample bytes),
// `bytes` for a bytes field (cleared by the caller; the reader appends one sample per index).
struct FieldOut {
  std::byte* fixed = nullptr;
  VarBytes* bytes = nullptr;
};

// A bound on one sample of a bytes field: the largest sample of the dataset when `exact`, else an
// estimate from a few samples (a batch may hold larger ones).
struct SampleBound {
  std::uint64_t bytes = 0;
  bool exact = false;
};

class STOKER_TOOLS_API Reader {
 public:
  virtual ~Reader() = default;

  // The selected fields, in delivery order; num_samples of the dataset.
  virtual const Schema& schema() const = 0;

  // Reads samples `indices` (in that order) of every selected field into out[f]: a fixed field's
  // indices.size() * bytes_per_sample() bytes, C-order [B, shape...]; a bytes field's samples
  // appended in order. REQUIRES: every index < num_samples; out.size() == schema().fields.size().
  // Throws stoker::Error naming the file, field and sample.
  virtual void read(std::span<const std::uint64_t> indices, std::span<const FieldOut> out) = 0;
  // The same for a schema of fixed fields only (throws otherwise): dest[f] receives field f.
  void read(std::span<const std::uint64_t> indices, std::span<std::byte* const> dest);

  // Bytes field f's bound (REQUIRES schema().fields[f].is_bytes()).
  virtual SampleBound sample_bound(std::size_t f) const;
  // How the reader understood a layout that is not plain (e.g. "keys: decimal; values: bytes");
  // empty when there is nothing to say.
  virtual std::string describe_layout() const { return {}; }

  // How many consecutive samples are stored together, for the quasi-random order: the rows of one
  // chunk of the largest field (chunked HDF5), else as many samples as fill about 64 KiB.
  virtual std::uint64_t locality_rows() const;

  // A hint that samples `indices` will be read soon: start reading them from storage now
  // (posix_fadvise / madvise WILLNEED), so that a batch of random reads of data that is not in the
  // page cache keeps the device busy instead of waiting for one read at a time. Never throws; may
  // do nothing.
  virtual void will_need(std::span<const std::uint64_t> /*indices*/) noexcept {}

  // How many files the reader has opened since it was constructed (a shard set's shards; 0 for
  // one file): Stats::shard_opens.
  virtual std::uint64_t shard_opens() const noexcept { return 0; }

  // What changes whenever the dataset is written, beyond its file's size and time (the dataset's
  // identity, formats/core/file_identity.h): LMDB's last committed transaction; 0 for HDF5 and
  // shard sets (whose shards are checked one by one).
  virtual std::uint64_t version() const noexcept { return 0; }

  // The text the dataset stores beside its samples, by name (Loader::metadata): an HDF5 file's
  // string attributes (its root's, then its group's, which win); an LMDB's records in its `stoker`
  // sub-database but the schema and the writers' private ones (docs/lmdb-layout.md); a shard set's
  // first shard's. Bounded as MetadataBounds says. Read when called; throws stoker::Error naming
  // the file when it cannot be read.
  virtual std::map<std::string, std::string> metadata() { return {}; }
};

// What Reader::metadata() keeps of what a file stores, so that a crafted file cannot make the
// answer grow without bound: valid UTF-8 text only, at most kMaxMetadataEntries entries and
// kMaxMetadataBytes of names and values in all, counted as JSON writes them (a control character
// as the 6 bytes of \u00XX, a quote or backslash as 2), which is how the probe sends them; what
// does not fit is left out.
inline constexpr std::size_t kMaxMetadataEntries = 256;
inline constexpr std::size_t kMaxMetadataBytes = 16u << 20;
class MetadataBounds {
 public:
  // Whether a value of `bytes` bytes may be read at all.
  bool may_fit(std::size_t bytes) const noexcept { return bytes <= kMaxMetadataBytes - used_; }
  // Whether nothing more can be added to a map of `entries` entries.
  bool exhausted(std::size_t entries) const noexcept {
    return entries >= kMaxMetadataEntries || used_ >= kMaxMetadataBytes;
  }
  // Sets out[name] = value when it is text and fits (replacing an earlier value of that name).
  void add(std::map<std::string, std::string>& out, std::string_view name, std::string_view value);

 private:
  std::size_t used_ = 0;
};

// How the HDF5 reader may read unfiltered data.
enum class Hdf5Path {
  automatic,  // straight from the file at HDF5's offsets where the layout allows, else HDF5
  hdf5_only,  // always through H5Dread
};

struct ReaderOptions {
  Format format = Format::auto_detect;
  std::vector<std::string> fields;  // empty: all, alphabetical
  std::string group;                // HDF5: fields are named relative to this group ("" is the root)
  // The schema the process that built the loader found, after checking the whole dataset (an
  // existing LMDB's keys): a worker opening the dataset again takes it instead of scanning again.
  std::optional<Schema> known;
  Hdf5Path hdf5_path = Hdf5Path::automatic;
  // The samples will be read in storage order: let the kernel read ahead (LMDB opens without
  // MDB_NORDAHEAD, HDF5's direct reads without POSIX_FADV_RANDOM). Random access turns that off:
  // read-ahead would fetch pages nobody reads.
  bool sequential = false;
  // A shard set (formats/shard_set.h): each shard's sample count and identity, as the process that
  // built the loader found them (empty: count them by opening every shard; an identity unset: not
  // recorded), and how many shards a reader keeps open at once. A shard opened whose identity is
  // not the one recorded is an error naming it.
  std::vector<std::uint64_t> shard_samples;
  std::vector<std::optional<FileIdentity>> shard_identities;
  std::size_t max_open_shards = kDefaultMaxOpenShards;
  // With shard_samples and `known`: no shard is opened before a sample of it is read (a remote set
  // read through a cache smaller than it: shard 0 may not be in the cache when the reader is made).
  bool open_shards_lazily = false;
  // An LMDB database without a stoker schema whose sample is one key per field
  // (formats/lmdb/lmdb_key_templates.h): Options::lmdb_keys and Options::lmdb_count_key.
  std::string lmdb_keys, lmdb_count_key;
};

// The fields `wanted` picks out of `available` (all, alphabetical, when `wanted` is empty).
// Throws stoker::Error naming `path`, an unknown or repeated field, and the fields present.
Schema select_fields(const Schema& available, const std::vector<std::string>& wanted, const std::string& path);

}  // namespace stoker::formats
