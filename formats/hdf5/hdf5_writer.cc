#include "formats/hdf5/hdf5_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "formats/hdf5/hdf5_errors.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

H5::DataType file_type_of(DType t) {
  switch (t) {
    case DType::u8: return H5::PredType::STD_U8LE;
    case DType::i8: return H5::PredType::STD_I8LE;
    case DType::u16: return H5::PredType::STD_U16LE;
    case DType::i16: return H5::PredType::STD_I16LE;
    case DType::i32: return H5::PredType::STD_I32LE;
    case DType::i64: return H5::PredType::STD_I64LE;
    case DType::f32: return H5::PredType::IEEE_F32LE;
    case DType::f64: return H5::PredType::IEEE_F64LE;
    case DType::u32: return H5::PredType::STD_U32LE;
    case DType::u64: return H5::PredType::STD_U64LE;
    case DType::b8: {
      // What h5py writes for numpy's bool: an enum over int8, FALSE = 0, TRUE = 1.
      H5::EnumType b{H5::IntType(H5::PredType::STD_I8LE)};
      std::int8_t no = 0, yes = 1;
      b.insert("FALSE", &no);
      b.insert("TRUE", &yes);
      return b;
    }
    case DType::bf16: {
      // bfloat16: a 2-byte HDF5 float with 8 exponent and 7 mantissa bits (docs/hdf5.md).
      H5::FloatType bf16;
      bf16.copy(H5::PredType::IEEE_F32LE);
      bf16.setFields(15, 7, 8, 0, 7);
      bf16.setSize(2);
      bf16.setEbias(127);
      return bf16;
    }
    case DType::f16: {
      // IEEE binary16, little-endian: what h5py writes for numpy's float16.
      H5::FloatType f16;
      f16.copy(H5::PredType::IEEE_F32LE);
      f16.setFields(15, 10, 5, 0, 10);
      f16.setSize(2);
      f16.setEbias(15);
      return f16;
    }
  }
  throw Error(ErrorCode::internal, "hdf5 writer: unknown dtype");
}

}  // namespace

struct Hdf5Writer::Impl {
  std::string path;
  Schema schema;
  H5::H5File file;
  std::vector<H5::DataSet> dsets;
  std::vector<H5::DataType> types;
  bool open = false;
  bool growable = false;

  // A growable dataset is extended to hold samples [0, end) before they are written.
  void reserve(std::size_t f, std::uint64_t end) {
    if (!growable) return;
    H5::DataSet& dset = dsets[f];
    const H5::DataSpace space = dset.getSpace();
    std::vector<hsize_t> dims(static_cast<std::size_t>(space.getSimpleExtentNdims()));
    space.getSimpleExtentDims(dims.data());
    if (dims[0] >= end) return;
    dims[0] = end;
    dset.extend(dims.data());
  }
};

Hdf5Writer::Hdf5Writer(const std::string& path, const Schema& schema, const Hdf5WriteOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Hdf5Quiet quiet;
  impl_->path = path;
  impl_->schema = schema;
  impl_->growable = options.growable && options.layout == Hdf5WriteOptions::Layout::chunked;
  impl_->file = hdf5_call([&] { return path + ": cannot create"; }, [&] { return H5::H5File(path, H5F_ACC_TRUNC); });
  impl_->open = true;
  for (const auto& f : schema.fields) {
    const auto context = [&] { return fmt::format("{}: dataset '{}': cannot create", path, f.name); };
    hdf5_call(context, [&] {
      std::vector<hsize_t> dims{schema.num_samples};
      for (auto d : f.shape) dims.push_back(static_cast<hsize_t>(d));
      std::vector<hsize_t> max_dims = dims;
      if (impl_->growable) max_dims[0] = H5S_UNLIMITED;
      const H5::DataSpace space(static_cast<int>(dims.size()), dims.data(), max_dims.data());
      H5::DSetCreatPropList dcpl;
      if (options.layout == Hdf5WriteOptions::Layout::chunked) {
        std::vector<hsize_t> chunk = dims;
        chunk[0] =
            std::max<hsize_t>(1, impl_->growable ? options.rows_per_chunk
                                                 : std::min<hsize_t>(options.rows_per_chunk, schema.num_samples));
        dcpl.setChunk(static_cast<int>(chunk.size()), chunk.data());
        if (options.gzip_level > 0) dcpl.setDeflate(options.gzip_level);
      }
      H5::DataType type = f.is_bytes() ? H5::DataType(H5::VarLenType(H5::PredType::STD_U8LE)) : file_type_of(f.dtype);
      impl_->dsets.push_back(impl_->file.createDataSet(f.name, type, space, dcpl));
      impl_->types.push_back(std::move(type));
    });
  }
}

Hdf5Writer::~Hdf5Writer() {
  Hdf5Quiet quiet;
  impl_.reset();
}

void Hdf5Writer::write(std::size_t f, std::uint64_t start, std::uint64_t count, const void* data) {
  Hdf5Quiet quiet;
  const Field& field = impl_->schema.fields.at(f);
  hdf5_call(
      [&] {
        return fmt::format("{}: dataset '{}': writing samples {}..{}", impl_->path, field.name, start,
                           start + count - 1);
      },
      [&] {
        impl_->reserve(f, start + count);
        const H5::DataSet& dset = impl_->dsets[f];
        H5::DataSpace space = dset.getSpace();
        std::vector<hsize_t> offset(field.shape.size() + 1, 0), extent{count};
        offset[0] = start;
        for (auto d : field.shape) extent.push_back(static_cast<hsize_t>(d));
        space.selectHyperslab(H5S_SELECT_SET, extent.data(), offset.data());
        const H5::DataSpace mem(static_cast<int>(extent.size()), extent.data());
        dset.write(data, impl_->types[f], mem, space);
      });
}

void Hdf5Writer::write_bytes(std::size_t f, std::uint64_t start, std::span<const std::span<const std::byte>> samples) {
  Hdf5Quiet quiet;
  const Field& field = impl_->schema.fields.at(f);
  if (!field.is_bytes())
    throw Error(ErrorCode::internal, fmt::format("hdf5 writer: '{}' is not a bytes field", field.name));
  if (samples.empty()) return;
  hdf5_call(
      [&] {
        return fmt::format("{}: dataset '{}': writing samples {}..{}", impl_->path, field.name, start,
                           start + samples.size() - 1);
      },
      [&] {
        std::vector<hvl_t> vl(samples.size());
        for (std::size_t k = 0; k < samples.size(); ++k) {
          vl[k].len = samples[k].size();
          vl[k].p = const_cast<std::byte*>(samples[k].data());  // only read by H5Dwrite
        }
        impl_->reserve(f, start + samples.size());
        const H5::DataSet& dset = impl_->dsets[f];
        H5::DataSpace space = dset.getSpace();
        const hsize_t offset = start, extent = samples.size();
        space.selectHyperslab(H5S_SELECT_SET, &extent, &offset);
        const H5::DataSpace mem(1, &extent);
        dset.write(vl.data(), H5::VarLenType(H5::PredType::NATIVE_UINT8), mem, space);
      });
}

void Hdf5Writer::set_text_attribute(const std::string& name, const std::string& value) {
  Hdf5Quiet quiet;
  hdf5_call([&] { return fmt::format("{}: attribute '{}': cannot write", impl_->path, name); },
            [&] {
              H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
              type.setCset(H5T_CSET_UTF8);
              H5::Group root = impl_->file.openGroup("/");
              H5::Attribute a = root.createAttribute(name, type, H5::DataSpace(H5S_SCALAR));
              const char* text = value.c_str();
              a.write(type, &text);
            });
}

void Hdf5Writer::close() {
  Hdf5Quiet quiet;
  impl_->dsets.clear();
  impl_->types.clear();
  if (impl_->open) {
    const auto context = [&] { return impl_->path + ": flush"; };
    hdf5_call(context, [&] {
      impl_->file.flush(H5F_SCOPE_LOCAL);
      impl_->file.close();
    });
    impl_->open = false;
  }
}

}  // namespace stoker::formats
