// Column: one field of an HDF5 reader, what the schema scan found and the read path chosen for it
// (formats/hdf5/read_path.h), with the two policies that choose: the chunk cache H5Dread gets, and
// when the file may be read without HDF5.
#pragma once

#include <H5Cpp.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "formats/core/reader.h"
#include "formats/hdf5/hdf5_schema.h"
#include "formats/hdf5/read_path.h"

namespace stoker::formats {

struct Column {
  Field field;
  std::string object;  // the dataset's or group's path in the file
  std::vector<hsize_t> dims;
  std::size_t sample_bytes = 0;    // fixed fields
  hsize_t chunk_rows = 0;          // a chunked dataset's samples per chunk; 0 otherwise
  DType member_dtype = DType::u8;  // a sample group's: the dtype every member has
  std::string bytes_kind;          // a bytes field's dataset: describe_bytes_source()
  std::unique_ptr<ReadPath> path;
};

// How a dataset is stored, from its creation properties.
struct Storage {
  H5D_layout_t layout = H5D_CONTIGUOUS;
  int filters = 0;
  bool deflate_only = false;   // one filter, deflate
  bool external = false;       // data in external files
  std::vector<hsize_t> chunk;  // chunked: the chunk's dimensions
};
Storage storage_of(const H5::DSetCreatPropList& dcpl, int rank);

// The chunk cache H5Dread gets. Unfiltered chunks are read in place, so a cache only costs a copy:
// none. Filtered chunks are inflated whole: a few are kept (8, at most 64 MiB) so that neighbouring
// samples of a batch inflate a chunk once. HDF5 1.10 does not hold its cache to rdcc_nbytes when
// there are more hash slots than chunks fit (measured: a 6 MiB cache with 521 slots grew to the
// whole 300 MB dataset), so the slot count, a prime just above the chunks that fit, is what bounds
// it: a colliding chunk evicts.
H5::DSetAccPropList chunk_cache_for(const Storage& storage, std::size_t chunk_bytes);

// Whether a dataset's bytes may be read without HDF5, and how: only with Hdf5Path::automatic, a
// stored type equal to the little-endian type delivered and no external storage; then contiguous
// unfiltered data is read directly, data chunked by whole samples directly when unfiltered and
// through libdeflate when deflate is its only filter (if a chunk fits in a sample's limit).
enum class RawPath { none, direct_contiguous, direct_chunked, inflate };
RawPath raw_path_for(const Storage& storage, Hdf5Path mode, bool stored_as_delivered, const std::vector<hsize_t>& dims,
                     std::size_t sample_bytes);

// Opens field `src` of `file` (`fd`: the reader's descriptor of the same file, for raw reads) with
// the fastest path allowed whose reads equal H5Dread's on three samples; H5Dread otherwise, and
// always for a dataset stored in another file (reached through an external link).
// Throws stoker::Error for a field the schema scan refuses.
Column open_column(const H5::H5File& file, int fd, const std::string& path, const FieldSource& src, Hdf5Path mode);

}  // namespace stoker::formats
