// Hdf5Writer: writes a dataset in stoker's HDF5 form (one root-group dataset per field, leading
// dimension = samples; a bytes field is a variable-length u8 dataset, docs/hdf5.md), for the demo
// data of loader-bench, stoker-pack and tests. Single-threaded.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "stoker/export.h"
#include "stoker/schema.h"

namespace stoker::formats {

struct Hdf5WriteOptions {
  enum class Layout { contiguous, chunked } layout = Layout::chunked;
  std::uint64_t rows_per_chunk = 256;  // chunked only
  int gzip_level = 0;                  // chunked only; 0 = no filter
  // Chunked only: the datasets start with the schema's num_samples (0 is fine) and grow as samples
  // are written past their end, for a writer that does not know the count in advance.
  bool growable = false;
};

class STOKER_TOOLS_API Hdf5Writer {
 public:
  // Creates (truncates) `path` with one dataset per field of `schema`.
  Hdf5Writer(const std::string& path, const Schema& schema, const Hdf5WriteOptions& options);
  ~Hdf5Writer();
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  // Writes samples [start, start + count) of fixed field `f` from `data` (C-order, little-endian).
  void write(std::size_t f, std::uint64_t start, std::uint64_t count, const void* data);
  // Writes samples [start, start + samples.size()) of bytes field `f`, one span each.
  void write_bytes(std::size_t f, std::uint64_t start, std::span<const std::span<const std::byte>> samples);
  // Sets the root group's attribute `name` to `value`, a variable-length UTF-8 string.
  void set_text_attribute(const std::string& name, const std::string& value);

  // Closes the file, reporting errors (the destructor closes quietly).
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::formats
