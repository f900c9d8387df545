#include "formats/hdf5/inflated_chunks.h"

#include <fmt/format.h>
#include <libdeflate.h>

#include <cstring>

#include "formats/hdf5/hdf5_errors.h"
#include "stoker/error.h"

namespace stoker::formats {

InflatedChunks::InflatedChunks(std::size_t chunk_bytes, std::size_t capacity)
    : chunk_bytes_(chunk_bytes),
      capacity_(std::max<std::size_t>(capacity, 1)),
      decompressor_(libdeflate_alloc_decompressor(), libdeflate_free_decompressor) {
  if (!decompressor_) throw Error(ErrorCode::io, "libdeflate_alloc_decompressor: out of memory");
}

InflatedChunks::~InflatedChunks() = default;

// The most bytes deflate (zlib's format) can take for n bytes: zlib's own compressBound, which
// covers every encoder's worst case (stored blocks, 5 bytes per 64 KiB), and some slack.
std::uint64_t InflatedChunks::deflate_bound(std::uint64_t n) noexcept {
  return n + (n >> 12) + (n >> 14) + (n >> 25) + 13 + 1024;
}

// A chunk's stored size is the file's say-so; HDF5 allocates it before reading a byte. A damaged
// (or crafted) index that claims 4 GB for a chunk of 64 KB is refused before anything is allocated.
void InflatedChunks::check_stored_size(hid_t dataset, std::uint64_t index, haddr_t addr, hsize_t stored,
                                       const std::string& context) {
  if (file_bytes_ == 0) {
    const hid_t file = H5Iget_file_id(dataset);
    if (file < 0) throw_hdf5(fmt::format("{}: the file of the dataset", context));
    hsize_t size = 0;
    const herr_t rc = H5Fget_filesize(file, &size);
    H5Fclose(file);
    if (rc < 0) throw_hdf5(fmt::format("{}: the size of the file", context));
    file_bytes_ = size;
  }
  const std::uint64_t bound = deflate_bound(chunk_bytes_);
  if (stored > bound || addr > file_bytes_ || stored > file_bytes_ - addr) {
    throw Error(
        ErrorCode::dataset,
        fmt::format(
            "{}: chunk {} claims {} stored bytes at offset {}, {}: the file is damaged", context, index, stored, addr,
            stored > bound ? fmt::format("more than a compressed chunk of {} bytes can take ({})", chunk_bytes_, bound)
                           : fmt::format("past the end of the file ({} bytes)", file_bytes_)));
  }
}

const std::byte* InflatedChunks::get(hid_t dataset, std::uint64_t index, std::span<const hsize_t> offset,
                                     const std::string& context) {
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    if (it->index == index) {
      lru_.splice(lru_.begin(), lru_, it);
      return lru_.front().bytes.data();
    }
  }
  unsigned filter_mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t stored = 0;
  if (H5Dget_chunk_info_by_coord(dataset, offset.data(), &filter_mask, &addr, &stored) < 0) {
    throw_hdf5(fmt::format("{}: locating chunk {}", context, index));
  }
  if (addr == HADDR_UNDEF) return nullptr;
  check_stored_size(dataset, index, addr, stored, context);
  raw_.resize(stored);
  std::uint32_t filters = 0;
  if (H5Dread_chunk(dataset, H5P_DEFAULT, offset.data(), &filters, raw_.data()) < 0) {
    throw_hdf5(fmt::format("{}: reading chunk {}", context, index));
  }
  Entry e{index, {}};
  if (lru_.size() == capacity_) {
    e.bytes = std::move(lru_.back().bytes);  // reuse the evicted buffer
    lru_.pop_back();
  }
  e.bytes.resize(chunk_bytes_);
  if (filters & 1u) {
    // The deflate filter was skipped for this chunk (it did not shrink it): stored as is.
    if (stored != chunk_bytes_) {
      throw Error(ErrorCode::dataset, fmt::format("{}: chunk {} is stored unfiltered with {} bytes, not {}", context,
                                                  index, stored, chunk_bytes_));
    }
    std::memcpy(e.bytes.data(), raw_.data(), chunk_bytes_);
  } else {
    std::size_t out = 0;
    const libdeflate_result rc =
        libdeflate_zlib_decompress(decompressor_.get(), raw_.data(), stored, e.bytes.data(), chunk_bytes_, &out);
    if (rc != LIBDEFLATE_SUCCESS || out != chunk_bytes_) {
      throw Error(ErrorCode::dataset, fmt::format("{}: chunk {} does not inflate to {} bytes ({}): the file is damaged",
                                                  context, index, chunk_bytes_,
                                                  rc == LIBDEFLATE_BAD_DATA             ? "bad deflate data"
                                                  : rc == LIBDEFLATE_INSUFFICIENT_SPACE ? "more data than a chunk holds"
                                                  : rc == LIBDEFLATE_SHORT_OUTPUT ? fmt::format("only {} bytes", out)
                                                                                  : "libdeflate error"));
    }
  }
  ++inflated_;
  lru_.push_front(std::move(e));
  return lru_.front().bytes.data();
}

}  // namespace stoker::formats
