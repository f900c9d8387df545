#include "formats/hdf5/hdf5_types.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace stoker::formats {

namespace {

TypeMatch integer_type(const H5::IntType& type) {
  TypeMatch m;
  const std::size_t size = type.getSize();
  m.numeric = true;
  const bool is_signed = type.getSign() == H5T_SGN_2;
  if (type.getPrecision() != size * 8) {
    m.why = fmt::format("integer with {} bits of precision in {} bytes", type.getPrecision(), size);
    return m;
  }
  switch (size) {
    case 1: m.dtype = is_signed ? DType::i8 : DType::u8; break;
    case 2: m.dtype = is_signed ? DType::i16 : DType::u16; break;
    case 4: m.dtype = is_signed ? DType::i32 : DType::u32; break;
    case 8: m.dtype = is_signed ? DType::i64 : DType::u64; break;
    default: break;
  }
  if (!m.dtype) m.why = fmt::format("{} {}-bit integer", is_signed ? "signed" : "unsigned", size * 8);
  return m;
}

TypeMatch float_type(const H5::FloatType& type) {
  TypeMatch m;
  const std::size_t size = type.getSize();
  m.numeric = true;
  std::size_t spos, epos, esize, mpos, msize;
  type.getFields(spos, epos, esize, mpos, msize);
  if (size == 2 && spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10) m.dtype = DType::f16;
  if (size == 4 && msize == 23 && esize == 8) m.dtype = DType::f32;
  if (size == 8 && msize == 52 && esize == 11) m.dtype = DType::f64;
  if (size == 2 && spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7) m.dtype = DType::bf16;
  if (!m.dtype) m.why = fmt::format("{}-bit float with {} exponent and {} mantissa bits", size * 8, esize, msize);
  return m;
}

// numpy's bool, as h5py writes it: an enum over a 1-byte integer with FALSE = 0 and TRUE = 1.
bool is_numpy_bool(const H5::EnumType& type) {
  if (type.getSize() != 1 || type.getNmembers() != 2) return false;
  std::int8_t no = -1, yes = -1;
  try {
    type.valueOf("FALSE", &no);
    type.valueOf("TRUE", &yes);
  } catch (const H5::Exception&) {
    H5Eclear2(H5E_DEFAULT);
  }
  return no == 0 && yes == 1;
}

// bfloat16 has no HDF5 type of its own; a 2-byte opaque type tagged "bfloat16" or "bf16" is one
// (docs/hdf5.md), the other is a 2-byte float with 8 exponent and 7 mantissa bits.
bool is_tagged_bfloat16(const H5::DataType& type) {
  const std::string tag = H5::DataType(type).getTag();
  return type.getSize() == 2 && (tag == "bfloat16" || tag == "bf16");
}

// Variable-length numbers (h5py's vlen_dtype(np.uint8), vlen_dtype(np.int32)): a bytes field of
// their little-endian bytes.
bool is_vlen_numbers(const H5::VarLenType& type) {
  const H5T_class_t c = type.getSuper().getClass();
  return c == H5T_INTEGER || c == H5T_FLOAT;
}

// Why a type of class `cls` that is none of the above is not delivered.
std::string why_not(const H5::DataSet& dset, H5T_class_t cls) {
  switch (cls) {
    case H5T_VLEN: {
      const H5::DataType base = dset.getVarLenType().getSuper();
      const H5T_class_t c = base.getClass();
      return fmt::format(
          "variable-length data of {}-byte {} elements; stoker reads variable-length numbers as a bytes field",
          base.getSize(), c == H5T_STRING ? "string" : "non-numeric");
    }
    case H5T_COMPOUND: return "a compound type, not numbers";
    case H5T_OPAQUE: return "opaque bytes, not numbers";
    case H5T_ENUM: return "an enum, not numbers";
    case H5T_ARRAY: return "an array type, not numbers";
    case H5T_REFERENCE: return "references, not numbers";
    default: return "not numbers (HDF5 type class " + std::to_string(static_cast<int>(cls)) + ")";
  }
}

}  // namespace

TypeMatch match_type(const H5::DataSet& dset) {
  const H5T_class_t cls = dset.getTypeClass();
  if (cls == H5T_INTEGER) return integer_type(dset.getIntType());
  if (cls == H5T_FLOAT) return float_type(dset.getFloatType());
  TypeMatch m;
  if ((cls == H5T_ENUM && is_numpy_bool(dset.getEnumType())) ||
      (cls == H5T_OPAQUE && is_tagged_bfloat16(dset.getDataType()))) {
    m.numeric = true;
    m.dtype = cls == H5T_ENUM ? DType::b8 : DType::bf16;
    return m;
  }
  if (cls == H5T_VLEN && is_vlen_numbers(dset.getVarLenType())) {
    m.vlen_bytes = true;
    m.bytes_source = BytesSource::vlen_numbers;
    const H5::DataType base = dset.getVarLenType().getSuper();
    const TypeMatch e = base.getClass() == H5T_INTEGER ? integer_type(H5::IntType(base.getId()))
                                                       : float_type(H5::FloatType(base.getId()));
    m.elements = e.dtype.value_or(DType::u8);
    return m;
  }
  if (cls == H5T_STRING) {
    m.vlen_bytes = true;
    m.bytes_source = dset.getStrType().isVariableStr() ? BytesSource::vlen_string : BytesSource::fixed_string;
    return m;
  }
  m.why = why_not(dset, cls);
  return m;
}

std::string describe_bytes_source(const H5::DataSet& dset) {
  switch (match_type(dset).bytes_source) {
    case BytesSource::vlen_numbers: {
      const H5::DataType base = dset.getVarLenType().getSuper();
      const bool is_float = base.getClass() == H5T_FLOAT;
      const char* kind = is_float ? "f" : H5Tget_sign(base.getId()) == H5T_SGN_NONE ? "u" : "i";
      return fmt::format("variable-length {}{}", kind, base.getSize() * 8);
    }
    case BytesSource::vlen_string: return "variable-length string";
    case BytesSource::fixed_string: return fmt::format("{}-byte string", dset.getStrType().getSize());
    case BytesSource::none: break;
  }
  return "variable-length";
}

H5::DataType little_endian_type_of(const H5::DataSet& dset) {
  if (dset.getTypeClass() == H5T_ENUM || dset.getTypeClass() == H5T_OPAQUE) {
    H5::DataType t;  // bool (1 byte) and tagged bfloat16: no byte order to convert
    t.copy(dset.getDataType());
    return t;
  }
  if (dset.getTypeClass() == H5T_INTEGER) {
    H5::IntType t;
    t.copy(dset.getIntType());
    t.setOrder(H5T_ORDER_LE);
    return t;
  }
  H5::FloatType t;
  t.copy(dset.getFloatType());
  t.setOrder(H5T_ORDER_LE);
  return t;
}

}  // namespace stoker::formats
