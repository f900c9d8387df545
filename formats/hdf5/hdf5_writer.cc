#include "formats/hdf5/hdf5_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string_view>
#include <vector>

#include "base/utf8.h"
#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/hdf5_write_driver.h"
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
  std::map<std::string, H5::DataSet> texts;  // write_texts()'s datasets, by path
  // The first write to the file that failed (hdf5_write_driver.h).
  WriteStatus status;
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

  // Runs `body` (HDF5 calls on the open file). A write that failed in it (the driver keeps HDF5
  // unaware of it, see hdf5_write_driver.h), or a failure of HDF5's own, abandons the file and
  // becomes a stoker::Error naming context(): the OS error ("No space left on device (ENOSPC)"), or
  // HDF5's message.
  template <class Context, class Body>
  void guarded(Context&& context, Body&& body) {
    if (!open)
      throw Error(ErrorCode::internal, fmt::format("{}: hdf5 writer used after it was closed or failed", path));
    try {
      body();
    } catch (const H5::Exception& e) {
      const std::string detail =
          hdf5_error_detail(e.getDetailMsg().empty() ? e.getFuncName() + " failed" : e.getDetailMsg());
      abandon();
      if (status.error) throw Error::from_errno(status.error, context());
      throw Error(ErrorCode::dataset, fmt::format("{}: {}", context(), detail));
    }
    if (status.error) {
      abandon();
      throw Error::from_errno(status.error, context());
    }
  }

  // Closes a file that failed, whose contents are lost anyway (the caller removes it). After a
  // failed write nothing more reaches the disk, and closing cannot fail for want of space.
  void abandon() noexcept {
    if (!open) return;
    open = false;
    try {
      dsets.clear();
      types.clear();
      texts.clear();
      file.close();
    } catch (const H5::Exception&) {
      hdf5_error_detail();  // nothing more to report than the failure that led here
    }
  }
};

Hdf5Writer::Hdf5Writer(const std::string& path, const Schema& schema, const Hdf5WriteOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Hdf5Quiet quiet;
  impl_->path = path;
  impl_->schema = schema;
  impl_->growable = options.growable && options.layout == Hdf5WriteOptions::Layout::chunked;
  // The driver that keeps a failed write from HDF5 (hdf5_write_driver.h).
  H5::FileAccPropList fapl;
  use_write_driver(fapl.getId(), &impl_->status);
  impl_->file = hdf5_call([&] { return path + ": cannot create"; },
                          [&] { return H5::H5File(path, H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT, fapl); });
  impl_->open = true;
  for (const auto& f : schema.fields) {
    const auto context = [&] { return fmt::format("{}: dataset '{}': cannot create", path, printable(f.name)); };
    impl_->guarded(context, [&] {
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
  // HDF5 writes its superblock when it flushes: until then a file that holds written samples is
  // no HDF5 file on disk. A run killed in the middle must leave one that says what it is (the tools
  // take an interrupted run's unfinished file for their own by its format: tools/common/output_check.h).
  impl_->guarded([&] { return path + ": flushing it"; }, [&] { impl_->file.flush(H5F_SCOPE_LOCAL); });
}

Hdf5Writer::~Hdf5Writer() {
  Hdf5Quiet quiet;
  impl_->abandon();  // closed without close(): written out as far as it can be, errors unreported
}

void Hdf5Writer::write(std::size_t f, std::uint64_t start, std::uint64_t count, const void* data) {
  Hdf5Quiet quiet;
  const Field& field = impl_->schema.fields.at(f);
  impl_->guarded(
      [&] {
        return fmt::format("{}: dataset '{}': writing samples {}..{}", impl_->path, printable(field.name), start,
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
    throw Error(ErrorCode::internal, fmt::format("hdf5 writer: '{}' is not a bytes field", printable(field.name)));
  if (samples.empty()) return;
  impl_->guarded(
      [&] {
        return fmt::format("{}: dataset '{}': writing samples {}..{}", impl_->path, printable(field.name), start,
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
  impl_->guarded([&] { return fmt::format("{}: attribute '{}': cannot write", impl_->path, printable(name)); },
                 [&] {
                   H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
                   type.setCset(H5T_CSET_UTF8);
                   H5::Group root = impl_->file.openGroup("/");
                   H5::Attribute a = root.createAttribute(name, type, H5::DataSpace(H5S_SCALAR));
                   const char* text = value.c_str();
                   a.write(type, &text);
                 });
}

void Hdf5Writer::write_texts(const std::string& name, std::uint64_t start, std::span<const std::string> texts) {
  Hdf5Quiet quiet;
  if (texts.empty()) return;
  impl_->guarded(
      [&] {
        return fmt::format("{}: dataset '{}': writing elements {}..{}", impl_->path, printable(name), start,
                           start + texts.size() - 1);
      },
      [&] {
        H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
        type.setCset(H5T_CSET_UTF8);
        auto it = impl_->texts.find(name);
        if (it == impl_->texts.end()) {
          const hsize_t none = 0, unlimited = H5S_UNLIMITED, chunk = 1024;
          const H5::DataSpace space(1, &none, &unlimited);
          H5::DSetCreatPropList dcpl;
          dcpl.setChunk(1, &chunk);
          H5::LinkCreatPropList lcpl;
          H5Pset_create_intermediate_group(lcpl.getId(), 1);
          H5::DataSet created = impl_->file.createDataSet(name, type, space, dcpl, H5::DSetAccPropList::DEFAULT, lcpl);
          it = impl_->texts.emplace(name, std::move(created)).first;
        }
        H5::DataSet& dset = it->second;
        hsize_t size = 0;
        dset.getSpace().getSimpleExtentDims(&size);
        const hsize_t offset = start, extent = texts.size();
        if (size < start + extent) {
          const hsize_t end = start + extent;
          dset.extend(&end);
        }
        H5::DataSpace space = dset.getSpace();
        space.selectHyperslab(H5S_SELECT_SET, &extent, &offset);
        // Each text as it is when it is UTF-8 holding no NUL (which would end it) and no backslash;
        // else escaped (stoker::printable: every backslash doubled, so that the escape is undone
        // exactly): a file name is bytes, and the strings are tagged UTF-8.
        std::vector<std::string> escaped(texts.size());
        std::vector<const char*> strings;
        for (std::size_t k = 0; k < texts.size(); ++k) {
          const std::string& t = texts[k];
          const bool as_is = t.find_first_of(std::string_view("\\\0", 2)) == std::string::npos && detail::is_utf8(t);
          if (!as_is) escaped[k] = printable(t);
          strings.push_back(as_is ? t.c_str() : escaped[k].c_str());
        }
        const H5::DataSpace mem(1, &extent);
        dset.write(strings.data(), type, mem, space);
      });
}

void Hdf5Writer::close() {
  Hdf5Quiet quiet;
  if (!impl_->open) return;
  impl_->guarded([&] { return impl_->path + ": flush"; }, [&] { impl_->file.flush(H5F_SCOPE_LOCAL); });
  impl_->open = false;
  hdf5_call([&] { return impl_->path + ": close"; },
            [&] {
              impl_->dsets.clear();
              impl_->types.clear();
              impl_->texts.clear();
              impl_->file.close();
            });
  // What closing wrote last (the file extended to its allocated size) failed.
  if (impl_->status.error) throw Error::from_errno(impl_->status.error, impl_->path + ": close");
}

}  // namespace stoker::formats
