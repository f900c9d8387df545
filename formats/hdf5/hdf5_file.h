// An HDF5 file opened for reading as stoker reads every file, and what its groups hold.
#pragma once

#include <H5Cpp.h>

#include <string>
#include <utility>
#include <vector>

namespace stoker::formats {

// Opens `path` read-only with the stdio driver and HDF5's file locking off. The stdio driver keeps
// stoker's handle apart from a handle the user's code may hold on the same file (HDF5 shares one
// open file between handles of the same driver, and a worker must not use state inherited through
// fork); a read-only loader must not take, or wait for, the file lock. Throws stoker::Error
// (ErrorCode::dataset) for a missing file, a directory or a file without the HDF5 signature.
H5::H5File open_hdf5_file(const std::string& path);

// The datasets and groups linked from a group ("" is the root), in name order, and the links that
// lead to no object: a soft link to a path that is not there, an external link whose file or
// object cannot be opened (each with what it says, e.g. "a soft link to '/gone', which leads
// nowhere"), never left out silently.
struct GroupListing {
  std::vector<std::string> datasets, groups;
  std::vector<std::pair<std::string, std::string>> broken;  // name, what the link says
};
GroupListing list_group(const H5::H5File& file, const std::string& group, const std::string& path);
// "the root group" or "group 'train'".
std::string group_label(const std::string& group);
// "datasets in the root group: a, b; groups: train" (for errors), and "; links that lead nowhere:
// c" when there are any.
std::string describe_listing(const GroupListing& listing, const std::string& group);

// Checks that every level of `group` ("a/b/c") exists; the error names the first that does not and
// what its parent holds, after `prefix` (e.g. "unknown field 'x': "), as ErrorCode::invalid_option:
// the group was asked for.
void require_group(const H5::H5File& file, const std::string& path, const std::string& group,
                   const std::string& prefix);

// Dataset `name`, or stoker::Error naming the file and the dataset.
H5::DataSet open_dataset(const H5::H5File& file, const std::string& name, const std::string& path,
                         const H5::DSetAccPropList& dapl = H5::DSetAccPropList::DEFAULT);

}  // namespace stoker::formats
