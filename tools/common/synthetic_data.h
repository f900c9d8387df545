// Synthetic image-classification datasets for benchmarks and demos: `image` u8[3,H,W] of
// noisy levels (deflate halves them, as it does decoded photos) and `label` i64 = index % 1000,
// written as HDF5 and/or LMDB in blocks so that memory stays small whatever the size.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "formats/hdf5/hdf5_writer.h"
#include "stoker/schema.h"

namespace stoker::tools {

Schema image_schema(std::uint64_t num_samples, std::int64_t side);

// `progress` (may be empty) is called with samples written so far.
void write_synthetic_hdf5(const std::string& path, const Schema& schema, const formats::Hdf5WriteOptions& options,
                          const std::function<void(std::uint64_t)>& progress = {});
void write_synthetic_lmdb(const std::string& path, const Schema& schema,
                          const std::function<void(std::uint64_t)>& progress = {});

}  // namespace stoker::tools
