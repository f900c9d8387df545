// The schema scan of an HDF5 file: which datasets and sample groups are fields, with their dtypes
// and shapes. Fields are datasets (the root group's or another group's, or selected by name or
// path) with a common leading dimension N. A variable-length u8 dataset, or a group whose members
// are the datasets "0" .. "N-1", is a bytes field (one run of bytes per sample). A dataset that
// cannot be delivered (of a type stoker lacks, stored where stoker does not read or HDF5 cannot:
// formats/hdf5/storage_check.h) and a link that leads nowhere are errors naming them: no field is
// ever dropped silently, nor read as fill values.
#pragma once

#include <H5Cpp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/schema.h"

namespace stoker::formats {

// Where a field comes from: a dataset, or a sample group of `members` members.
struct FieldSource {
  std::string name;    // as delivered: relative to the reader's group
  std::string object;  // path in the file
  std::uint64_t members = 0;
};

// The fields that make up the schema: `wanted` (names, or paths like "train/images", relative to
// `group`) if given, in that order, else every dataset and sample group in `group` (alphabetical),
// which must then all be deliverable. Throws stoker::Error naming what is missing or cannot be
// delivered, with what the group holds.
std::vector<FieldSource> field_sources(const H5::H5File& file, const std::string& path,
                                       const std::vector<std::string>& wanted, const std::string& group);

// A field as the scan found it: its schema entry and the dataset's dimensions (N first).
struct Inspected {
  Field field;
  std::vector<hsize_t> dims;
};
// The field dataset `name` makes: rank, dims and dtype checked; throws for anything stoker cannot
// deliver (an unsupported dtype, a scalar, an empty dataset, a sample larger than a sample may be).
Inspected inspect(const H5::DataSet& dset, const std::string& name, const std::string& path);
// The bytes field a sample group of `n` members makes: each member's elements in C order and
// little-endian, all members of member "0"'s dtype (returned in `member_dtype`).
Inspected inspect_members(const H5::H5File& file, const std::string& group, const std::string& name, std::uint64_t n,
                          const std::string& path, DType& member_dtype);
// Throws unless every field has the same number of samples.
void check_same_n(const std::vector<Inspected>& fields, const std::string& path);

// The schema of `path`: the fields field_sources() picks (alphabetical when `wanted` is empty),
// inspected. Throws stoker::Error (ErrorCode::dataset) naming every dataset that cannot be
// delivered, a missing or non-HDF5 file, or fields of different N.
Schema hdf5_schema(const std::string& path, const std::vector<std::string>& wanted = {}, const std::string& group = "");

}  // namespace stoker::formats
