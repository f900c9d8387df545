// Readers: read the samples of one batch from a dataset into caller-provided arrays.
//
// A Reader is opened in the process that uses it (a worker opens its own after fork) and used by
// one thread at a time.
#pragma once

#include "stoker/export.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/options.h"
#include "stoker/schema.h"

namespace stoker::formats {

class STOKER_TOOLS_API Reader {
 public:
  virtual ~Reader() = default;

  // The selected fields, in delivery order; num_samples of the dataset.
  virtual const Schema& schema() const = 0;

  // Reads samples `indices` (in that order) of every selected field: dest[f] receives
  // indices.size() * schema().fields[f].bytes_per_sample() bytes, C-order [B, shape...].
  // REQUIRES: every index < num_samples; dest.size() == schema().fields.size().
  // Throws stoker::Error naming the file, field and sample.
  virtual void read(std::span<const std::uint64_t> indices, std::span<std::byte* const> dest) = 0;

  // How many consecutive samples are stored together, for the quasi-random order: the rows of one
  // chunk of the largest field (chunked HDF5), else as many samples as fill about 64 KiB.
  virtual std::uint64_t locality_rows() const;

  // A hint that samples `indices` will be read soon: start reading them from storage now
  // (posix_fadvise / madvise WILLNEED), so that a batch of random reads of data that is not in the
  // page cache keeps the device busy instead of waiting for one read at a time. Never throws; may
  // do nothing.
  virtual void will_need(std::span<const std::uint64_t> /*indices*/) noexcept {}
};

// How the HDF5 reader may read unfiltered data.
enum class Hdf5Path {
  automatic,  // straight from the file at HDF5's offsets where the layout allows, else HDF5
  hdf5_only,  // always through H5Dread
};

struct ReaderOptions {
  Format format = Format::auto_detect;
  std::vector<std::string> fields;  // empty: all, alphabetical
  Hdf5Path hdf5_path = Hdf5Path::automatic;
  // The samples will be read in storage order: let the kernel read ahead (LMDB opens without
  // MDB_NORDAHEAD). Random access turns that off: read-ahead would fetch pages nobody reads.
  bool sequential = false;
};

// Decides the format of `path` from its contents: an HDF5 signature, or an LMDB meta page (a file,
// or a directory holding data.mdb). Throws stoker::Error for a missing path or neither format.
STOKER_TOOLS_API Format detect_format(const std::string& path);

STOKER_TOOLS_API std::unique_ptr<Reader> open_reader(const std::string& path, const ReaderOptions& options);

// The fields `wanted` picks out of `available` (all, alphabetical, when `wanted` is empty).
// Throws stoker::Error naming `path`, an unknown or repeated field, and the fields present.
Schema select_fields(const Schema& available, const std::vector<std::string>& wanted, const std::string& path);

}  // namespace stoker::formats
