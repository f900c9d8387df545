// The inflate read path (formats/hdf5/read_path.h): deflate-only chunks read raw and inflated by
// libdeflate, a few kept, samples copied out of them.
#include <fcntl.h>
#include <fmt/format.h>

#include <cstring>

#include "base/env.h"
#include "formats/hdf5/inflated_chunks.h"
#include "formats/hdf5/read_path.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

class InflateRead final : public ReadPath {
 public:
  InflateRead(ArrayDataset a, int fd, hsize_t rows_per_chunk, std::size_t cache_chunks)
      : a_(std::move(a)),
        fd_(fd),
        rows_per_chunk_(rows_per_chunk),
        chunks_(rows_per_chunk * a_.sample_bytes, cache_chunks) {}
  Kind kind() const noexcept override { return Kind::inflate; }
  std::uint64_t chunks_inflated() const noexcept override { return chunks_.inflated(); }

  void read(std::uint64_t start, std::uint64_t count, const FieldOut& out) override {
    try {
      read_rows(start, count, out.fixed);
    } catch (const Error& e) {
      throw Error(e.code(), fmt::format("{}: samples {}..{}: {}", a_.where, start, start + count - 1, e.what()));
    }
  }

  // The chunks that hold the samples, whole (they are inflated whole).
  void will_need(std::span<const std::uint64_t> indices) noexcept override {
    std::vector<hsize_t> offset(a_.dims.size(), 0);
    std::uint64_t last = UINT64_MAX;
    for (std::uint64_t i : indices) {
      const std::uint64_t chunk = i / rows_per_chunk_;
      if (chunk == last) continue;
      last = chunk;
      offset[0] = chunk * rows_per_chunk_;
      unsigned mask = 0;
      haddr_t addr = HADDR_UNDEF;
      hsize_t size = 0;
      if (H5Dget_chunk_info_by_coord(a_.dset.getId(), offset.data(), &mask, &addr, &size) >= 0 && addr != HADDR_UNDEF) {
        (void)detail::Env::get().posix_fadvise(fd_, static_cast<off_t>(addr), static_cast<off_t>(size),
                                               POSIX_FADV_WILLNEED);
      }
    }
    H5Eclear2(H5E_DEFAULT);
  }

 private:
  void read_rows(std::uint64_t start, std::uint64_t count, std::byte* dst) {
    std::vector<hsize_t> offset(a_.dims.size(), 0);
    while (count > 0) {
      const std::uint64_t chunk = start / rows_per_chunk_;
      const std::uint64_t row = start % rows_per_chunk_;
      const std::uint64_t n = std::min<std::uint64_t>(count, rows_per_chunk_ - row);
      offset[0] = chunk * rows_per_chunk_;
      if (const std::byte* rows = chunks_.get(a_.dset.getId(), chunk, offset, a_.where)) {
        std::memcpy(dst, rows + row * a_.sample_bytes, n * a_.sample_bytes);
      } else {
        for (std::uint64_t k = 0; k < n; ++k)
          std::memcpy(dst + k * a_.sample_bytes, a_.fill_sample.data(), a_.sample_bytes);
      }
      dst += n * a_.sample_bytes;
      start += n;
      count -= n;
    }
  }

  ArrayDataset a_;
  int fd_;
  hsize_t rows_per_chunk_;
  InflatedChunks chunks_;
};

}  // namespace

std::unique_ptr<ReadPath> inflate_read_path(ArrayDataset array, int fd, hsize_t rows_per_chunk,
                                            std::size_t cache_chunks) {
  return std::make_unique<InflateRead>(std::move(array), fd, rows_per_chunk, cache_chunks);
}

}  // namespace stoker::formats
