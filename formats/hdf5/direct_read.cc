// The direct read path (formats/hdf5/read_path.h): pread at the offsets HDF5 reports, for
// unfiltered data stored as delivered, contiguous or chunked by whole samples.
#include <fcntl.h>
#include <fmt/format.h>

#include <cstring>

#include "base/env.h"
#include "base/posix_error.h"
#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/read_path.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

constexpr haddr_t kNotLookedUp = HADDR_MAX;

class DirectRead final : public ReadPath {
 public:
  // rows_per_chunk 0: contiguous at `offset`.
  DirectRead(ArrayDataset a, int fd, haddr_t offset, hsize_t rows_per_chunk)
      : a_(std::move(a)), fd_(fd), offset_(offset), rows_per_chunk_(rows_per_chunk) {
    if (rows_per_chunk_) chunk_addr_.assign((a_.dims[0] + rows_per_chunk_ - 1) / rows_per_chunk_, kNotLookedUp);
  }
  Kind kind() const noexcept override { return Kind::direct; }

  void read(std::uint64_t start, std::uint64_t count, const FieldOut& out) override {
    // Reads of the file itself: an OS error (EIO, a truncated file) names the dataset and samples.
    try {
      read_rows(start, count, out.fixed);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: samples {}..{}: {}", a_.where, start, start + count - 1, e.what()));
    }
  }

  void will_need(std::span<const std::uint64_t> indices) noexcept override {
    detail::Env& env = detail::Env::get();
    for (std::uint64_t i : indices) {
      try {
        const haddr_t at = address_of(i);
        if (at == HADDR_UNDEF) continue;
        (void)env.posix_fadvise(fd_, static_cast<off_t>(at), static_cast<off_t>(a_.sample_bytes), POSIX_FADV_WILLNEED);
      } catch (const std::exception&) {
        // A hint only: read() reports whatever is wrong.
      }
    }
    H5Eclear2(H5E_DEFAULT);
  }

 private:
  // Where sample i's bytes are in the file; HADDR_UNDEF in a chunk never written.
  haddr_t address_of(std::uint64_t i) {
    if (!rows_per_chunk_) return offset_ + i * a_.sample_bytes;
    const haddr_t chunk = chunk_address(i / rows_per_chunk_);
    return chunk == HADDR_UNDEF ? HADDR_UNDEF : chunk + (i % rows_per_chunk_) * a_.sample_bytes;
  }

  haddr_t chunk_address(std::uint64_t chunk) {
    haddr_t& addr = chunk_addr_[chunk];
    if (addr == kNotLookedUp) {
      std::vector<hsize_t> offset(a_.dims.size(), 0);
      offset[0] = chunk * rows_per_chunk_;
      unsigned filter_mask = 0;
      haddr_t a = HADDR_UNDEF;
      hsize_t size = 0;
      // No C++ call for a chunk's address.
      if (H5Dget_chunk_info_by_coord(a_.dset.getId(), offset.data(), &filter_mask, &a, &size) < 0) {
        throw_hdf5(fmt::format("{}: locating chunk {}", a_.where, chunk));
      }
      addr = a;  // HADDR_UNDEF: never written, reads as the fill value
    }
    return addr;
  }

  void read_rows(std::uint64_t start, std::uint64_t count, std::byte* dst) {
    if (!rows_per_chunk_) {
      detail::pread_exact(fd_, dst, count * a_.sample_bytes, static_cast<off_t>(offset_ + start * a_.sample_bytes),
                          a_.path);
      return;
    }
    while (count > 0) {
      const std::uint64_t row = start % rows_per_chunk_;
      const std::uint64_t n = std::min<std::uint64_t>(count, rows_per_chunk_ - row);
      const haddr_t addr = chunk_address(start / rows_per_chunk_);
      if (addr == HADDR_UNDEF) {
        for (std::uint64_t k = 0; k < n; ++k)
          std::memcpy(dst + k * a_.sample_bytes, a_.fill_sample.data(), a_.sample_bytes);
      } else {
        detail::pread_exact(fd_, dst, n * a_.sample_bytes, static_cast<off_t>(addr + row * a_.sample_bytes), a_.path);
      }
      dst += n * a_.sample_bytes;
      start += n;
      count -= n;
    }
  }

  ArrayDataset a_;
  int fd_;
  haddr_t offset_;
  hsize_t rows_per_chunk_;
  std::vector<haddr_t> chunk_addr_;  // per chunk along dim 0, kNotLookedUp until first use
};

}  // namespace

std::unique_ptr<ReadPath> direct_read_path(ArrayDataset array, int fd, haddr_t offset) {
  return std::make_unique<DirectRead>(std::move(array), fd, offset, 0);
}

std::unique_ptr<ReadPath> direct_chunked_read_path(ArrayDataset array, int fd, hsize_t rows_per_chunk) {
  return std::make_unique<DirectRead>(std::move(array), fd, HADDR_UNDEF, rows_per_chunk);
}

}  // namespace stoker::formats
