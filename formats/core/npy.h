// NumPy's .npy serialisation (the "NPY format": magic "\x93NUMPY", version, header length, then a
// Python dict literal with 'descr', 'fortran_order' and 'shape', then the array's bytes): read, for
// LMDB values that are .npy arrays, and written, for loader-bench's --save-batch. One table of
// dtypes serves both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/export.h"

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

// A version 1.0 header for a C-order array of `dtype` and `shape` (bf16, which NumPy lacks, as its
// raw 16 bits: '<u2'), padded so that the data starts 64-byte aligned.
std::string npy_header(DType dtype, std::span<const std::int64_t> shape);

// Writes the array (`bytes` of C-order data) to `path` as a .npy file; throws stoker::Error (io)
// naming the file.
STOKER_TOOLS_API void write_npy(const std::string& path, DType dtype, std::span<const std::int64_t> shape,
                                const void* data, std::size_t bytes);

}  // namespace stoker::formats
