// ReadPath: how one field of an HDF5 file is read, chosen once per field when the reader opens
// (formats/hdf5/column.h says which):
//   direct   unfiltered data, contiguous or chunked by whole samples, whose stored type is the
//            little-endian type delivered: pread at the offsets HDF5 reports (chunk addresses looked
//            up lazily and cached). pread, not mmap: a mapped file that shrinks or sits on a network
//            filesystem turns into SIGBUS.
//   inflate  chunks whose only filter is deflate: read raw and inflated by libdeflate
//            (formats/hdf5/inflated_chunks.h), a few kept.
//   hdf5     anything else of numbers: H5Dread of one hyperslab per run of samples.
//   vlen     a variable-length u8 dataset: a bytes field, read in runs of at most 64 samples.
//   members  a group of datasets "0" .. "N-1": a bytes field, one dataset per sample.
// Not thread-safe: one reader, one thread.
#pragma once

#include <H5Cpp.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/core/reader.h"

namespace stoker::formats {

class ReadPath {
 public:
  enum class Kind { direct, inflate, hdf5, vlen, members };
  virtual ~ReadPath() = default;
  virtual Kind kind() const noexcept = 0;

  // Samples [start, start + count) into `out`: a fixed field's count samples at out.fixed, or a
  // bytes field's samples appended to out.bytes. Throws stoker::Error naming the dataset and the
  // samples.
  virtual void read(std::uint64_t start, std::uint64_t count, const FieldOut& out) = 0;
  // posix_fadvise(WILLNEED) on the samples' bytes where their place in the file is known. A hint:
  // never throws, may do nothing.
  virtual void will_need(std::span<const std::uint64_t> /*indices*/) noexcept {}
  // Bytes fields: the bytes of sample i.
  virtual std::uint64_t sample_bytes(std::uint64_t i);
  // Chunks inflated so far (inflate).
  virtual std::uint64_t chunks_inflated() const noexcept { return 0; }
};

// What the array paths share: the dataset and how a sample of it is delivered.
struct ArrayDataset {
  H5::DataSet dset;
  H5::DataType mem_type;      // little-endian, what is delivered
  std::vector<hsize_t> dims;  // N first
  std::size_t sample_bytes = 0;
  std::string where;                   // "FILE: dataset 'NAME'", for errors: made once, not per read
  std::string path;                    // the file, for OS errors
  std::vector<std::byte> fill_sample;  // a sample of the fill value: what unwritten chunks hold
};

std::unique_ptr<ReadPath> hdf5_read_path(ArrayDataset array);
// `fd`: the reader's descriptor of the file (it outlives the path). `offset`: a contiguous
// dataset's address; `rows_per_chunk` instead for a dataset chunked by whole samples.
std::unique_ptr<ReadPath> direct_read_path(ArrayDataset array, int fd, haddr_t offset);
std::unique_ptr<ReadPath> direct_chunked_read_path(ArrayDataset array, int fd, hsize_t rows_per_chunk);
// `cache_chunks`: how many inflated chunks are kept.
std::unique_ptr<ReadPath> inflate_read_path(ArrayDataset array, int fd, hsize_t rows_per_chunk,
                                            std::size_t cache_chunks);
std::unique_ptr<ReadPath> vlen_read_path(const H5::DataSet& dset, std::string where);
// `path`: the file's, for what its members' storage names (formats/hdf5/storage_check.h).
std::unique_ptr<ReadPath> member_read_path(const H5::H5File& file, std::string path, std::string group,
                                           DType member_dtype, std::string where);

}  // namespace stoker::formats
