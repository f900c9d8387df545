// InflatedChunks: gzip-compressed (deflate) HDF5 chunks read raw with H5Dread_chunk and inflated
// with libdeflate, keeping the few most recently used.
//
// HDF5 inflates through zlib and copies the chunk out of its cache into the selection; libdeflate
// inflates a whole buffer several times faster than zlib's streaming inflate, and a batch's samples
// are then copied straight out of the inflated chunk. Used by Hdf5Reader for datasets whose only
// filter is deflate, after checking at open that it reads what H5Dread reads. Not thread-safe: one
// per reader, as readers are per worker.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

struct libdeflate_decompressor;

namespace stoker::formats {

class InflatedChunks {
 public:
  // Chunks of `chunk_bytes` inflated; at most `capacity` kept.
  InflatedChunks(std::size_t chunk_bytes, std::size_t capacity);
  ~InflatedChunks();
  InflatedChunks(const InflatedChunks&) = delete;
  InflatedChunks& operator=(const InflatedChunks&) = delete;

  // The inflated chunk at `offset` (its coordinates in the dataset), identified by `index`; nullptr
  // when the chunk was never written (the caller delivers the fill value). Throws stoker::Error
  // naming `context` and the chunk for a read or inflate failure.
  const std::byte* get(hid_t dataset, std::uint64_t index, std::span<const hsize_t> offset, const std::string& context);

  std::uint64_t inflated() const noexcept { return inflated_; }  // chunks inflated so far

  // The most stored bytes a deflated chunk of n bytes may have.
  static std::uint64_t deflate_bound(std::uint64_t n) noexcept;

 private:
  struct Entry {
    std::uint64_t index;
    std::vector<std::byte> bytes;
  };
  void check_stored_size(hid_t dataset, std::uint64_t index, haddr_t addr, hsize_t stored, const std::string& context);

  std::size_t chunk_bytes_, capacity_;
  std::uint64_t file_bytes_ = 0;  // the file's size, read at the first chunk
  std::list<Entry> lru_;          // most recent first
  std::vector<std::byte> raw_;
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> decompressor_;
  std::uint64_t inflated_ = 0;
};

}  // namespace stoker::formats
