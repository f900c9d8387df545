// Hdf5Reader: the Reader (formats/core/reader.h) of an HDF5 file. Which datasets and groups are
// its fields is the schema scan's (formats/hdf5/hdf5_schema.h); how each field is read, its read
// path's (formats/hdf5/read_path.h), chosen when the reader opens (formats/hdf5/column.h); how the
// file is opened, formats/hdf5/hdf5_file.h's. A batch is read with one read per run of consecutive
// indices.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "formats/core/reader.h"
#include "stoker/export.h"

namespace stoker::formats {

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
  // The scalar string attributes of the root group, then of the fields' group.
  std::map<std::string, std::string> metadata() override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::formats
