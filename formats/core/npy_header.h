// The header of a NumPy .npy serialisation (NumPy's "NPY format": magic "\x93NUMPY", version,
// header length, then a Python dict literal with 'descr', 'fortran_order' and 'shape').
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoker/dtype.h"

namespace stoker::formats {

struct NpyHeader {
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;
  std::size_t header_bytes = 0;  // magic .. end of the dict: where the array's bytes start
  std::size_t data_bytes = 0;    // what shape and dtype make
};

// True when `value` starts with the .npy magic.
bool looks_like_npy(std::span<const std::byte> value) noexcept;

// Parses the header of a value that looks_like_npy(); throws stoker::Error saying what is wrong (a
// truncated header, a dtype stoker does not deliver such as big-endian or object arrays, Fortran
// order, a shape larger than kMaxSampleBytes).
NpyHeader parse_npy_header(std::span<const std::byte> value);

}  // namespace stoker::formats
