// Hdf5Reader: fields are datasets (the root group's or another group's, or selected by name or
// path) with a common leading dimension N. A variable-length u8 dataset, or a group whose members
// are the datasets "0" .. "N-1", is a bytes field (one run of bytes per sample).
//
// Each batch is read with one simple selection per run of consecutive indices (a union of many
// hyperslabs is pathologically slow on chunked data). Datasets stored without filters, with a
// stored type equal to the little-endian type delivered, contiguous or chunked by whole samples,
// are read straight from the file with pread at the offsets HDF5 reports (chunk addresses looked
// up lazily and cached); that path is checked against H5Dread when the reader opens and HDF5 is
// the fallback whenever a condition does not hold. pread, not mmap: a mapped file that shrinks or
// sits on a network filesystem turns into SIGBUS.
//
// Files are opened read-only with the stdio driver and HDF5's file locking off. The stdio driver
// keeps stoker's handle apart from a handle the user's code may hold on the same file (HDF5 shares
// one open file between handles of the same driver, and a worker must not use state inherited
// through fork).
#pragma once

#include <memory>
#include <string>

#include "formats/core/reader.h"
#include "stoker/export.h"

namespace stoker::formats {

// The schema of every dataset in the root group, alphabetical; throws stoker::Error naming every
// dataset that cannot be delivered (a field is never dropped silently), for a missing or non-HDF5
// file, an unsupported dtype, an empty dataset or datasets of different N. When `wanted` is
// non-empty only those datasets (names or paths such as "train/images") are examined.
// Names are relative to `group` ("" is the root); with no names, its datasets and sample groups (a
// group whose members are named 0 .. N-1, one sample each: a bytes field named after the group).
Schema hdf5_schema(const std::string& path, const std::vector<std::string>& wanted = {},
                                    const std::string& group = "");

class STOKER_TOOLS_API Hdf5Reader final : public Reader {
 public:
  // `sequential`: the samples will be read in storage order, so the kernel may read ahead of the
  // direct path's reads; otherwise it reads what is asked for and no more (POSIX_FADV_RANDOM).
  Hdf5Reader(const std::string& path, const std::vector<std::string>& fields, Hdf5Path path_mode,
             const std::string& group = "", bool sequential = false);
  ~Hdf5Reader() override;

  const Schema& schema() const override;
  using Reader::read;
  void read(std::span<const std::uint64_t> indices, std::span<const FieldOut> out) override;
  // Bytes fields (variable-length u8 datasets, sample groups): twice the largest of 16 samples.
  SampleBound sample_bound(std::size_t f) const override;
  // The bytes fields and where they come from.
  std::string describe_layout() const override;

  // Whether field `f` (in schema order) is read straight from the file.
  bool reads_directly(std::size_t f) const;
  // Whether field `f` (gzip-compressed) is read raw and inflated by libdeflate, and how many chunks
  // this reader has inflated that way.
  bool inflates(std::size_t f) const;
  std::uint64_t chunks_inflated() const;
  // Samples per chunk of field `f`; 0 when it is not chunked.
  std::uint64_t rows_per_chunk(std::size_t f) const;
  // The chunk rows of the largest chunked field; Reader's default when none is chunked.
  std::uint64_t locality_rows() const override;
  // posix_fadvise(WILLNEED) on the samples' bytes where their offsets are known (the direct path)
  // and on the chunks that hold them (chunked data).
  void will_need(std::span<const std::uint64_t> indices) noexcept override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::formats
