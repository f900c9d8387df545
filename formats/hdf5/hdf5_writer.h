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
  // Writes elements [start, start + texts.size()) of the dataset `name` (a path: "stoker/paths"),
  // one variable-length UTF-8 string per element, creating it (and its groups) on first use, chunked
  // and growable. It is no field: the schema's datasets are the root group's. A text is stored as it
  // is when it is UTF-8 holding no NUL and no backslash, else as stoker::printable(text) (a byte that
  // is not UTF-8 as \xNN, a control character as \n, \0, ..., each backslash doubled): so every
  // element is UTF-8, and one holding a backslash is undone to the exact bytes (README.md, stoker-pack).
  void write_texts(const std::string& name, std::uint64_t start, std::span<const std::string> texts);

  // Closes the file, reporting errors (the destructor closes quietly).
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::formats
