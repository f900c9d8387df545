// HDF5 datatypes as stoker's dtypes: which a dataset's type is, and the memory type it is read as.
#pragma once

#include <H5Cpp.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stoker/dtype.h"

namespace stoker::formats {

// What a dataset delivered as a bytes field holds per sample, and so how it is read: a
// variable-length sequence of numbers (u8, or any integer or float: their little-endian bytes), a
// variable-length string (h5py's string_dtype()), a fixed-length string (numpy's S16: its bytes
// without the padding).
enum class BytesSource : std::uint8_t { none, vlen_numbers, vlen_string, fixed_string };

// The stoker dtype of a dataset's type, or an explanation of why there is none.
struct TypeMatch {
  std::optional<DType> dtype;
  bool numeric = false;
  bool vlen_bytes = false;  // delivered as a bytes field, read as `bytes_source` says
  BytesSource bytes_source = BytesSource::none;
  // A bytes field's elements: variable-length numbers' dtype (u8 where stoker has no dtype for
  // them: their bytes), u8 for strings.
  DType elements = DType::u8;
  std::string why;
  // Numbers (whether or not of a dtype stoker has: the schema scan names an unsupported one) or bytes.
  bool deliverable() const { return numeric || vlen_bytes; }
};
TypeMatch match_type(const H5::DataSet& dset);
// What a dataset delivered as a bytes field holds, for describing the file: "variable-length u8",
// "variable-length i32", "variable-length string", "16-byte string".
std::string describe_bytes_source(const H5::DataSet& dset);

// The little-endian memory type stoker delivers for a dataset of numeric class.
H5::DataType little_endian_type_of(const H5::DataSet& dset);

// The types stoker reads, for errors.
inline constexpr std::string_view kSupportedTypes =
    "bool, u8, i8, u16, i16, u32, i32, u64, i64, f16, bf16, f32, f64, and as bytes: variable-length numbers, "
    "variable-length and fixed-length strings";

}  // namespace stoker::formats
