#include "formats/hdf5/column.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/hdf5_file.h"
#include "formats/hdf5/hdf5_types.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

bool is_prime(std::size_t n) {
  for (std::size_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return n >= 2;
}

// A sample of the fill value: what a chunk never written reads as.
std::vector<std::byte> fill_sample(const H5::DSetCreatPropList& dcpl, const H5::DataType& mem_type, DType dtype,
                                   std::size_t sample_bytes) {
  std::vector<std::byte> one(dtype_size(dtype)), sample(sample_bytes);
  dcpl.getFillValue(mem_type, one.data());
  for (std::size_t off = 0; off < sample_bytes; off += one.size())
    std::memcpy(sample.data() + off, one.data(), one.size());
  return sample;
}

// Whether `dset` is stored in the file the reader's descriptor `fd` reads: a dataset reached through
// an external link lives in another file, whose offsets mean nothing in this one (only HDF5 reads it).
bool stored_in(const H5::DataSet& dset, int fd) {
  const std::string name = dset.getFileName();
  struct stat in_hdf5, in_fd;
  return ::stat(name.c_str(), &in_hdf5) == 0 && ::fstat(fd, &in_fd) == 0 && in_hdf5.st_dev == in_fd.st_dev &&
         in_hdf5.st_ino == in_fd.st_ino;
}

// Reads samples 0, N/2 and N-1 through `raw` and through `reference`: whether they agree (a path
// that fails, say on an offset past the end, does not: HDF5 knows better).
bool reads_agree(ReadPath& raw, ReadPath& reference, std::uint64_t n, std::size_t sample_bytes) {
  std::vector<std::byte> a(sample_bytes), b(sample_bytes);
  for (std::uint64_t i : {std::uint64_t{0}, n / 2, n - 1}) {
    try {
      raw.read(i, 1, FieldOut{a.data(), nullptr});
    } catch (const Error&) {
      return false;
    }
    reference.read(i, 1, FieldOut{b.data(), nullptr});
    if (a != b) return false;
  }
  return true;
}

Column array_column(const H5::H5File& file, int fd, const std::string& path, const FieldSource& src, Hdf5Path mode) {
  const std::string where = fmt::format("{}: dataset '{}'", path, printable(src.object));
  Column c;
  c.object = src.object;
  H5::DSetCreatPropList dcpl;
  {
    // Inspected with default access properties first: the chunk cache is chosen from the layout.
    const H5::DataSet probe = open_dataset(file, src.object, path);
    Inspected in = inspect(probe, src.name, path);
    c.field = std::move(in.field);
    c.dims = std::move(in.dims);
    dcpl = hdf5_call([&] { return where; }, [&] { return probe.getCreatePlist(); });
  }
  if (c.field.is_bytes()) {
    const H5::DataSet dset = open_dataset(file, src.object, path);
    c.bytes_kind = hdf5_call([&] { return where; }, [&] { return describe_bytes_source(dset); });
    c.path = vlen_read_path(dset, where);
    return c;
  }
  c.sample_bytes = c.field.bytes_per_sample();
  const auto context = [&] { return where; };
  return hdf5_call(context, [&] {
    const Storage storage = storage_of(dcpl, static_cast<int>(c.dims.size()));
    if (storage.layout == H5D_CHUNKED) c.chunk_rows = storage.chunk[0];
    std::size_t chunk_bytes = dtype_size(c.field.dtype);
    for (hsize_t d : storage.chunk) chunk_bytes *= d;
    ArrayDataset array;
    array.dset = file.openDataSet(src.object, chunk_cache_for(storage, chunk_bytes));
    array.mem_type = little_endian_type_of(array.dset);
    array.dims = c.dims;
    array.sample_bytes = c.sample_bytes;
    array.where = where;
    array.path = path;
    const RawPath raw =
        stored_in(array.dset, fd)
            ? raw_path_for(storage, mode, array.dset.getDataType() == array.mem_type, c.dims, c.sample_bytes)
            : RawPath::none;
    if (raw == RawPath::direct_chunked || raw == RawPath::inflate) {
      array.fill_sample = fill_sample(dcpl, array.mem_type, c.field.dtype, c.sample_bytes);
    }
    std::unique_ptr<ReadPath> reference = hdf5_read_path(array);
    std::unique_ptr<ReadPath> fast;
    if (raw == RawPath::direct_contiguous) {
      haddr_t offset = HADDR_UNDEF;
      try {
        offset = array.dset.getOffset();
      } catch (const H5::Exception&) {
        H5Eclear2(H5E_DEFAULT);
      }
      // Unallocated: HDF5 delivers the fill value.
      if (offset != HADDR_UNDEF) fast = direct_read_path(array, fd, offset);
    } else if (raw == RawPath::direct_chunked) {
      fast = direct_chunked_read_path(array, fd, storage.chunk[0]);
    } else if (raw == RawPath::inflate) {
      // The same few chunks HDF5's cache would have kept (8, at most 64 MiB).
      fast = inflate_read_path(array, fd, storage.chunk[0],
                               std::clamp<std::size_t>((64u << 20) / std::max<std::size_t>(chunk_bytes, 1), 1, 8));
    }
    c.path = fast && reads_agree(*fast, *reference, c.dims[0], c.sample_bytes) ? std::move(fast) : std::move(reference);
    return std::move(c);
  });
}

}  // namespace

Storage storage_of(const H5::DSetCreatPropList& dcpl, int rank) {
  Storage s;
  s.layout = dcpl.getLayout();
  s.filters = dcpl.getNfilters();
  s.external = dcpl.getExternalCount() != 0;
  if (s.layout == H5D_CHUNKED) {
    s.chunk.assign(static_cast<std::size_t>(rank), 0);
    dcpl.getChunk(rank, s.chunk.data());
  }
  if (s.filters == 1) {
    unsigned flags = 0, config = 0;
    std::size_t nelmts = 0;
    char filter_name[64];
    s.deflate_only =
        dcpl.getFilter(0, flags, nelmts, nullptr, sizeof filter_name, filter_name, config) == H5Z_FILTER_DEFLATE;
  }
  return s;
}

H5::DSetAccPropList chunk_cache_for(const Storage& storage, std::size_t chunk_bytes) {
  H5::DSetAccPropList dapl;
  if (storage.layout != H5D_CHUNKED) return dapl;
  const std::size_t cache = storage.filters > 0 ? std::clamp<std::size_t>(chunk_bytes * 8, chunk_bytes, 64u << 20) : 0;
  std::size_t slots = cache / std::max<std::size_t>(chunk_bytes, 1) + 1;
  while (!is_prime(slots)) ++slots;
  dapl.setChunkCache(slots, cache, 1.0);
  return dapl;
}

RawPath raw_path_for(const Storage& storage, Hdf5Path mode, bool stored_as_delivered, const std::vector<hsize_t>& dims,
                     std::size_t sample_bytes) {
  if (mode != Hdf5Path::automatic || !stored_as_delivered || storage.external) return RawPath::none;
  if (storage.layout == H5D_CONTIGUOUS) return storage.filters == 0 ? RawPath::direct_contiguous : RawPath::none;
  if (storage.layout != H5D_CHUNKED || storage.chunk.empty() || storage.chunk[0] == 0) return RawPath::none;
  for (std::size_t d = 1; d < dims.size(); ++d) {
    if (storage.chunk[d] != dims[d]) return RawPath::none;  // chunks must hold whole samples
  }
  if (storage.filters == 0) return RawPath::direct_chunked;
  // A chunk larger than a sample may be is left to HDF5.
  if (storage.deflate_only && storage.chunk[0] <= kMaxSampleBytes / sample_bytes) return RawPath::inflate;
  return RawPath::none;
}

Column open_column(const H5::H5File& file, int fd, const std::string& path, const FieldSource& src, Hdf5Path mode) {
  if (!src.members) return array_column(file, fd, path, src, mode);
  Column c;
  c.object = src.object;
  Inspected in = inspect_members(file, src.object, src.name, src.members, path, c.member_dtype);
  c.field = std::move(in.field);
  c.dims = std::move(in.dims);
  c.path = member_read_path(file, path, src.object, c.member_dtype,
                            fmt::format("{}: group '{}'", path, printable(src.object)));
  return c;
}

}  // namespace stoker::formats
