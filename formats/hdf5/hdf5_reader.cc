#include "formats/hdf5/hdf5_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <optional>

#include "base/posix_error.h"
#include "base/progress_note.h"
#include "base/unique_fd.h"
#include "formats/hdf5/column.h"
#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/hdf5_file.h"
#include "formats/hdf5/hdf5_schema.h"
#include "stoker/error.h"

namespace stoker::formats {

struct Hdf5Reader::Impl {
  std::string path;
  std::string group;  // where the fields are; empty: the root
  H5::H5File file;
  detail::UniqueFd fd;  // for the raw read paths
  Schema schema;
  std::vector<Column> columns;
};

Hdf5Reader::Hdf5Reader(const std::string& path, const std::vector<std::string>& fields, Hdf5Path path_mode,
                       const std::string& group, bool sequential)
    : impl_(std::make_unique<Impl>()) {
  Hdf5Quiet quiet;
  impl_->path = path;
  impl_->group = group;
  impl_->file = open_hdf5_file(path);
  impl_->fd = detail::UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!impl_->fd) detail::throw_open_errno(path);
  // A read of a sample not yet cached would otherwise fetch up to 4x its size around it: on a
  // shuffled epoch, pages nobody reads. A hint: its result does not matter.
  if (!sequential) (void)::posix_fadvise(impl_->fd.get(), 0, 0, POSIX_FADV_RANDOM);
  std::vector<Inspected> found;
  for (const auto& src : field_sources(impl_->file, path, fields, group)) {
    impl_->columns.push_back(open_column(impl_->file, impl_->fd.get(), path, src, path_mode));
    found.push_back({impl_->columns.back().field, impl_->columns.back().dims});
  }
  check_same_n(found, path);
  impl_->schema.num_samples = impl_->columns.front().dims[0];
  for (const auto& c : impl_->columns) impl_->schema.fields.push_back(c.field);
  impl_->schema.validate(path);
}

Hdf5Reader::~Hdf5Reader() {
  Hdf5Quiet quiet;
  impl_.reset();
}

const Schema& Hdf5Reader::schema() const { return impl_->schema; }

bool Hdf5Reader::reads_directly(std::size_t f) const {
  return impl_->columns.at(f).path->kind() == ReadPath::Kind::direct;
}

bool Hdf5Reader::inflates(std::size_t f) const { return impl_->columns.at(f).path->kind() == ReadPath::Kind::inflate; }

std::uint64_t Hdf5Reader::chunks_inflated() const {
  std::uint64_t n = 0;
  for (const auto& c : impl_->columns) n += c.path->chunks_inflated();
  return n;
}

std::uint64_t Hdf5Reader::rows_per_chunk(std::size_t f) const { return impl_->columns.at(f).chunk_rows; }

void Hdf5Reader::will_need(std::span<const std::uint64_t> indices) noexcept {
  Hdf5Quiet quiet;
  for (auto& c : impl_->columns) c.path->will_need(indices);
}

namespace {

// The text of scalar string attribute `a` of type `type`; nullopt for a NULL variable-length
// string (one h5py cannot write, the C API can). Read through the C API: the C++ API's
// Attribute::read(type, std::string&) takes a NULL string for a C string.
std::optional<std::string> attribute_text(const H5::Attribute& a, const H5::StrType& type) {
  if (type.isVariableStr()) {
    char* text = nullptr;
    if (H5Aread(a.getId(), type.getId(), &text) < 0) throw H5::AttributeIException("H5Aread");
    const std::unique_ptr<char, decltype(&H5free_memory)> owned(text, &H5free_memory);  // HDF5's allocation
    if (text == nullptr) return std::nullopt;
    return std::string(text);
  }
  std::string value(type.getSize(), '\0');
  a.read(type, value.data());
  value.erase(std::find(value.begin(), value.end(), '\0'), value.end());  // NUL-padded or -terminated
  return value;
}

// Adds `location`'s scalar string attributes (fixed-length or variable) to `out`, replacing those
// of the same name, within the bounds Reader::metadata() states. An attribute that cannot be read
// is left out: the file's samples do not depend on it.
void add_text_attributes(const H5::H5Object& location, MetadataBounds& bounds,
                         std::map<std::string, std::string>& out) {
  const int n = location.getNumAttrs();
  for (int k = 0; k < n && !bounds.exhausted(out.size()); ++k) {
    try {
      const H5::Attribute a = location.openAttribute(static_cast<unsigned>(k));
      if (a.getTypeClass() != H5T_STRING || a.getSpace().getSimpleExtentType() != H5S_SCALAR) continue;
      const H5::StrType type = a.getStrType();
      if (!type.isVariableStr() && !bounds.may_fit(type.getSize())) continue;
      if (const std::optional<std::string> value = attribute_text(a, type)) bounds.add(out, a.getName(), *value);
    } catch (const H5::Exception&) {
      (void)hdf5_error_detail();  // clears the error stack
    }
  }
}

}  // namespace

std::map<std::string, std::string> Hdf5Reader::metadata() {
  Hdf5Quiet quiet;
  std::map<std::string, std::string> out;
  const std::string where = impl_->group.empty() ? "/" : impl_->group;
  hdf5_call([&] { return fmt::format("{}: reading the attributes of '{}'", impl_->path, where); },
            [&] {
              MetadataBounds bounds;
              add_text_attributes(impl_->file.openGroup("/"), bounds, out);
              if (where != "/") add_text_attributes(impl_->file.openGroup(where), bounds, out);
            });
  return out;
}

std::uint64_t Hdf5Reader::locality_rows() const {
  const Column* largest = nullptr;
  for (const auto& c : impl_->columns) {
    if (c.chunk_rows > 0 && (!largest || c.sample_bytes > largest->sample_bytes)) largest = &c;
  }
  return largest ? largest->chunk_rows : Reader::locality_rows();
}

std::string Hdf5Reader::describe_layout() const {
  std::vector<std::string> parts;
  for (const auto& c : impl_->columns) {
    if (c.path->kind() == ReadPath::Kind::members) {
      parts.push_back(fmt::format("'{}': group '{}' of {} datasets '0' .. '{}' ({}), one sample each",
                                  printable(c.field.name), printable(c.object), c.dims[0], c.dims[0] - 1,
                                  dtype_name(c.member_dtype)));
    } else if (c.path->kind() == ReadPath::Kind::vlen) {
      parts.push_back(fmt::format("'{}': {} dataset '{}'", printable(c.field.name), c.bytes_kind, printable(c.object)));
    }
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

SampleBound Hdf5Reader::sample_bound(std::size_t f) const {
  // An estimate from up to 16 samples spread over the dataset, doubled: a batch of larger samples
  // takes the loader's overflow path (docs/shm-layout.md).
  Hdf5Quiet quiet;
  Column& c = impl_->columns.at(f);
  const std::uint64_t n = c.dims[0], probes = std::min<std::uint64_t>(n, 16);
  std::uint64_t largest = 0;
  for (std::uint64_t p = 0; p < probes; ++p) {
    largest = std::max(largest, c.path->sample_bytes(p * (n - 1) / std::max<std::uint64_t>(probes - 1, 1)));
    detail::note_progress();  // each a read of the file (base/progress_note.h)
  }
  return {std::max<std::uint64_t>(2 * largest, 4096), false};
}

void Hdf5Reader::read(std::span<const std::uint64_t> indices, std::span<const FieldOut> out) {
  Hdf5Quiet quiet;
  const std::uint64_t n = impl_->schema.num_samples;
  for (std::size_t f = 0; f < impl_->columns.size(); ++f) {
    Column& c = impl_->columns[f];
    FieldOut at = out[f];
    // One read per run of consecutive indices: a union of many hyperslabs is pathologically slow
    // on chunked data.
    for (std::size_t k = 0; k < indices.size();) {
      const std::uint64_t start = indices[k];
      std::size_t run = 1;
      while (k + run < indices.size() && indices[k + run] == start + run) ++run;
      if (start >= n || start + run > n) {
        throw Error(ErrorCode::dataset, fmt::format("{}: sample {} is out of range ({} samples)", impl_->path,
                                                    std::max<std::uint64_t>(start, n), n));
      }
      c.path->read(start, run, at);
      if (at.fixed) at.fixed += run * c.sample_bytes;
      k += run;
    }
  }
}

}  // namespace stoker::formats
