// Whether a dataset's bytes can be read as they are stored, checked when the schema is scanned so
// that a field HDF5 would read wrongly, or not at all, is an error naming it when the loader is
// built, never a batch of fill values or of another file's bytes:
//   - every filter of its pipeline must be available for decoding (a filter HDF5 lacks, such as
//     h5py's LZF, would fail every batch);
//   - its data must be inside the HDF5 file: external raw storage (H5Pset_external) is refused
//     altogether, since it may name any file on the machine (a crafted file could deliver
//     /etc/shadow's bytes as samples);
//   - a virtual dataset's every source file and dataset must be found where HDF5 looks for them
//     (HDF5 reads a missing source as the fill value), and each source is checked in turn.
// docs/hdf5.md ("What is a dataset") states the rules.
#pragma once

#include <H5Cpp.h>

#include <optional>
#include <string>

namespace stoker::formats {

// Why the dataset `dset` (named `name`) of the file at `path` cannot be read as stored ("compressed with filter
// 32000 (lzf), which is not available: ..."), with what the user can do; nullopt when it can.
// Throws stoker::Error (ErrorCode::dataset) for an HDF5 failure while looking.
std::optional<std::string> unreadable_storage(const H5::DataSet& dset, const std::string& name,
                                              const std::string& path);

}  // namespace stoker::formats
