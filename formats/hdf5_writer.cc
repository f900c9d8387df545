#include "formats/hdf5_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "formats/hdf5_handle.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

hid_t file_type_of(DType t) {
  switch (t) {
    case DType::u8: return H5T_STD_U8LE;
    case DType::i8: return H5T_STD_I8LE;
    case DType::u16: return H5T_STD_U16LE;
    case DType::i16: return H5T_STD_I16LE;
    case DType::i32: return H5T_STD_I32LE;
    case DType::i64: return H5T_STD_I64LE;
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f64: return H5T_IEEE_F64LE;
    case DType::f16: break;
  }
  return H5I_INVALID_HID;
}

// IEEE binary16, little-endian: what h5py writes for numpy's float16.
Hid make_f16() {
  Hid t(check_hid(H5Tcopy(H5T_IEEE_F32LE), "f16 type"));
  check_herr(H5Tset_fields(t.get(), 15, 10, 5, 0, 10), "f16 type");
  check_herr(H5Tset_size(t.get(), 2), "f16 type");
  check_herr(H5Tset_ebias(t.get(), 15), "f16 type");
  return t;
}

}  // namespace

struct Hdf5Writer::Impl {
  std::string path;
  Schema schema;
  Hid file;
  std::vector<Hid> dsets;
  std::vector<Hid> types;
};

Hdf5Writer::Hdf5Writer(const std::string& path, const Schema& schema, const Hdf5WriteOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Hdf5Quiet quiet;
  impl_->path = path;
  impl_->schema = schema;
  impl_->file = Hid(check_hid(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), path + ": cannot create"));
  for (const auto& f : schema.fields) {
    std::string ctx = fmt::format("{}: dataset '{}'", path, f.name);
    std::vector<hsize_t> dims{schema.num_samples};
    for (auto d : f.shape) dims.push_back(static_cast<hsize_t>(d));
    Hid space(check_hid(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), ctx));
    Hid dcpl(check_hid(H5Pcreate(H5P_DATASET_CREATE), ctx));
    if (options.layout == Hdf5WriteOptions::Layout::chunked) {
      std::vector<hsize_t> chunk = dims;
      chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(options.rows_per_chunk, schema.num_samples));
      check_herr(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), ctx + ": chunking");
      if (options.gzip_level > 0) check_herr(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options.gzip_level)), ctx);
    }
    Hid type = f.dtype == DType::f16 ? make_f16() : Hid(check_hid(H5Tcopy(file_type_of(f.dtype)), ctx));
    impl_->dsets.emplace_back(check_hid(
        H5Dcreate2(impl_->file.get(), f.name.c_str(), type.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
        ctx + ": cannot create"));
    impl_->types.push_back(std::move(type));
  }
}

Hdf5Writer::~Hdf5Writer() {
  Hdf5Quiet quiet;
  impl_.reset();
}

void Hdf5Writer::write(std::size_t f, std::uint64_t start, std::uint64_t count, const void* data) {
  Hdf5Quiet quiet;
  const Field& field = impl_->schema.fields.at(f);
  std::string ctx = fmt::format("{}: dataset '{}': writing samples {}..{}", impl_->path, field.name, start,
                                start + count - 1);
  hid_t dset = impl_->dsets[f].get();
  Hid space(check_hid(H5Dget_space(dset), ctx));
  std::vector<hsize_t> offset(field.shape.size() + 1, 0), extent{count};
  offset[0] = start;
  for (auto d : field.shape) extent.push_back(static_cast<hsize_t>(d));
  check_herr(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, offset.data(), nullptr, extent.data(), nullptr), ctx);
  Hid mem(check_hid(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr), ctx));
  check_herr(H5Dwrite(dset, impl_->types[f].get(), mem.get(), space.get(), H5P_DEFAULT, data), ctx);
}

void Hdf5Writer::close() {
  Hdf5Quiet quiet;
  impl_->dsets.clear();
  impl_->types.clear();
  hid_t id = impl_->file.get();
  if (id >= 0) {
    check_herr(H5Fflush(id, H5F_SCOPE_LOCAL), impl_->path + ": flush");
    impl_->file = Hid();
  }
}

}  // namespace stoker::formats
