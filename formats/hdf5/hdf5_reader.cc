#include "formats/hdf5/hdf5_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/inflated_chunks.h"
#include "loader/base/env.h"
#include "loader/base/posix_error.h"
#include "loader/base/unique_fd.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

constexpr haddr_t kNotLookedUp = HADDR_MAX;

H5::H5File open_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) detail::throw_errno(path, ErrorCode::dataset);
  if (S_ISDIR(st.st_mode)) throw Error(ErrorCode::dataset, fmt::format("{}: is a directory, not an HDF5 file", path));
  bool is_hdf5 = false;
  try {
    is_hdf5 = H5::H5File::isHdf5(path);
  } catch (const H5::Exception&) {
    H5Eclear2(H5E_DEFAULT);
  }
  if (!is_hdf5) throw Error(ErrorCode::dataset, fmt::format("{}: not an HDF5 file (no HDF5 signature)", path));
  const auto context = [&] { return path + ": cannot open"; };
  return hdf5_call(context, [&] {
    H5::FileAccPropList fapl;
    fapl.setStdio();
    // No C++ call for file locking: a read-only loader must not take (or wait for) the file lock.
    if (H5Pset_file_locking(fapl.getId(), false, true) < 0) throw_hdf5(path + ": disabling file locking");
    return H5::H5File(path, H5F_ACC_RDONLY, H5::FileCreatPropList::DEFAULT, fapl);
  });
}

// The datasets and groups linked from a group ("" is the root), in name order.
struct GroupListing {
  std::vector<std::string> datasets, groups;
};

// "the root group" or "group 'train'".
std::string group_label(const std::string& group) {
  return group.empty() ? "the root group" : fmt::format("group '{}'", group);
}

GroupListing list_group(const H5::H5File& file, const std::string& group, const std::string& path) {
  const auto context = [&] { return fmt::format("{}: listing {}", path, group_label(group)); };
  return hdf5_call(context, [&] {
    const H5::Group g = file.openGroup(group.empty() ? "/" : group);
    GroupListing out;
    const hsize_t n = g.getNumObjs();
    for (hsize_t i = 0; i < n; ++i) {
      std::string name = g.getObjnameByIdx(i);
      H5O_type_t type = H5O_TYPE_UNKNOWN;
      try {
        type = g.childObjType(name);
      } catch (const H5::Exception&) {
        H5Eclear2(H5E_DEFAULT);  // a dangling link: neither
      }
      if (type == H5O_TYPE_DATASET) out.datasets.push_back(std::move(name));
      if (type == H5O_TYPE_GROUP) out.groups.push_back(std::move(name));
    }
    return out;
  });
}

// "datasets in the root group: a, b; groups: train" (for errors).
std::string describe_listing(const GroupListing& l, const std::string& group) {
  return fmt::format("datasets in {}: {}; groups: {}", group_label(group),
                     l.datasets.empty() ? "none" : fmt::format("{}", fmt::join(l.datasets, ", ")),
                     l.groups.empty() ? "none" : fmt::format("{}", fmt::join(l.groups, ", ")));
}

// The stoker dtype of a dataset's type, or an explanation of why there is none.
struct TypeMatch {
  std::optional<DType> dtype;
  bool numeric = false;
  bool vlen_bytes = false;  // variable-length u8: a bytes field
  std::string why;
  // Numbers (whether or not of a dtype stoker has: inspect() names an unsupported one) or bytes.
  bool deliverable() const { return numeric || vlen_bytes; }
};

TypeMatch match_type(const H5::DataSet& dset) {
  TypeMatch m;
  const H5T_class_t cls = dset.getTypeClass();
  if (cls == H5T_INTEGER) {
    const H5::IntType type = dset.getIntType();
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
  if (cls == H5T_FLOAT) {
    const H5::FloatType type = dset.getFloatType();
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
  if (cls == H5T_ENUM) {
    // numpy's bool, as h5py writes it: an enum over a 1-byte integer with FALSE = 0 and TRUE = 1.
    const H5::EnumType type = dset.getEnumType();
    if (type.getSize() == 1 && type.getNmembers() == 2) {
      std::int8_t no = -1, yes = -1;
      try {
        type.valueOf("FALSE", &no);
        type.valueOf("TRUE", &yes);
      } catch (const H5::Exception&) {
        H5Eclear2(H5E_DEFAULT);
      }
      if (no == 0 && yes == 1) {
        m.numeric = true;
        m.dtype = DType::b8;
        return m;
      }
    }
  }
  if (cls == H5T_OPAQUE) {
    // bfloat16 has no HDF5 type of its own; a 2-byte opaque type tagged "bfloat16" or "bf16" is one
    // (docs/hdf5.md), the other is a 2-byte float with 8 exponent and 7 mantissa bits.
    const H5::DataType type = dset.getDataType();
    const std::string tag = H5::DataType(type).getTag();
    if (type.getSize() == 2 && (tag == "bfloat16" || tag == "bf16")) {
      m.numeric = true;
      m.dtype = DType::bf16;
      return m;
    }
  }
  if (cls == H5T_VLEN) {
    // Variable-length u8 (h5py's vlen_dtype(np.uint8)): a bytes field.
    const H5::VarLenType type = dset.getVarLenType();
    const H5::DataType base = type.getSuper();
    if (base.getClass() == H5T_INTEGER && base.getSize() == 1 && H5Tget_sign(base.getId()) == H5T_SGN_NONE) {
      m.vlen_bytes = true;
      return m;
    }
  }
  switch (cls) {
    case H5T_STRING: m.why = "strings, not numbers"; break;
    case H5T_VLEN: {
      const H5::DataType base = dset.getVarLenType().getSuper();
      m.why =
          fmt::format("variable-length data of {}-byte {} elements; stoker reads variable-length u8 as a bytes field",
                      base.getSize(),
                      base.getClass() == H5T_INTEGER ? "integer"
                      : base.getClass() == H5T_FLOAT ? "float"
                                                     : "non-numeric");
      break;
    }
    case H5T_COMPOUND: m.why = "a compound type, not numbers"; break;
    case H5T_OPAQUE: m.why = "opaque bytes, not numbers"; break;
    case H5T_ENUM: m.why = "an enum, not numbers"; break;
    case H5T_ARRAY: m.why = "an array type, not numbers"; break;
    case H5T_REFERENCE: m.why = "references, not numbers"; break;
    default: m.why = "not numbers (HDF5 type class " + std::to_string(static_cast<int>(cls)) + ")"; break;
  }
  return m;
}

// The little-endian memory type stoker delivers for a dataset of numeric class.
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

constexpr std::string_view kSupported =
    "bool, u8, i8, u16, i16, u32, i32, u64, i64, f16, bf16, f32, f64, and variable-length u8 as bytes";

// One field = one dataset (an array of N samples, or a variable-length u8 dataset of N), or a
// group whose members "0" .. "N-1" are one sample each.
struct Column {
  enum class Source { array, vlen, members };
  Source source = Source::array;
  std::string object;              // the dataset's or group's path in the file
  DType member_dtype = DType::u8;  // members: the dtype every member must have
  Field field;
  std::string where;  // "FILE: dataset 'NAME'", for errors: made once, not per read
  std::size_t sample_bytes = 0;
  H5::DataSet dset;
  H5::DataType mem_type;
  H5::DataSpace file_space;
  std::vector<hsize_t> dims;
  bool direct = false;
  bool chunked = false;
  haddr_t contiguous_offset = HADDR_UNDEF;
  hsize_t rows_per_chunk = 0;       // direct path only
  hsize_t chunk_rows = 0;           // any chunked dataset
  std::vector<haddr_t> chunk_addr;  // per chunk along dim 0, kNotLookedUp until first use
  std::vector<std::byte> fill_sample;
  // Deflate-only chunks: read raw and inflated by libdeflate (formats/hdf5/inflated_chunks.h).
  std::unique_ptr<InflatedChunks> inflated;
};

struct Inspected {
  Field field;
  std::vector<hsize_t> dims;
};

// Reads rank, dims and dtype of dataset `name`; throws for anything stoker cannot deliver.
Inspected inspect(const H5::DataSet& dset, const std::string& name, const std::string& path) {
  const std::string ctx = fmt::format("{}: dataset '{}'", path, name);
  const auto context = [&] { return ctx; };
  return hdf5_call(context, [&] {
    TypeMatch m = match_type(dset);
    if (!m.dtype && !m.vlen_bytes) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: unsupported dtype ({}); stoker reads {}", ctx, m.why, kSupported));
    }
    const H5::DataSpace space = dset.getSpace();
    const int rank = space.getSimpleExtentNdims();
    if (rank < 1)
      throw Error(ErrorCode::dataset, fmt::format("{}: is a scalar; a field needs a leading sample dimension", ctx));
    Inspected out;
    out.dims.resize(static_cast<std::size_t>(rank));
    space.getSimpleExtentDims(out.dims.data());
    if (out.dims[0] == 0) throw Error(ErrorCode::dataset, fmt::format("{}: is empty (0 samples)", ctx));
    if (m.vlen_bytes) {
      if (rank != 1) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: a variable-length dataset of rank {}; a bytes field is one-dimensional (one "
                                "element per sample)",
                                ctx, rank));
      }
      out.field = Field::bytes_field(name);
      return out;
    }
    out.field.name = name;
    out.field.dtype = *m.dtype;
    for (int d = 1; d < rank; ++d) {
      if (out.dims[d] == 0) throw Error(ErrorCode::dataset, fmt::format("{}: has a zero-sized dimension {}", ctx, d));
      if (out.dims[d] > kMaxSampleBytes) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: dimension {} is {}, more than a sample may hold ({} bytes, kMaxSampleBytes)", ctx,
                                d, out.dims[d], kMaxSampleBytes));
      }
      out.field.shape.push_back(static_cast<std::int64_t>(out.dims[d]));
    }
    Schema one;
    one.fields = {out.field};
    one.validate(ctx);  // the sample's size, with overflow checks, before anything is allocated
    return out;
  });
}

// A group whose members are named "0" .. "N-1" (decimal, no leading zeros): one sample each. The
// number of members, or 0 when the names are anything else.
std::uint64_t sample_group_size(const H5::H5File& file, const std::string& group, const std::string& path) {
  const auto context = [&] { return fmt::format("{}: listing group '{}'", path, group); };
  return hdf5_call(context, [&]() -> std::uint64_t {
    const H5::Group g = file.openGroup(group);
    const hsize_t n = g.getNumObjs();
    for (hsize_t i = 0; i < n; ++i) {
      const std::string name = g.getObjnameByIdx(i);
      if (name.empty() || name.size() > 19 || (name.size() > 1 && name[0] == '0') ||
          !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
          std::stoull(name) >= n) {
        return 0;  // distinct names, each a decimal below n: exactly 0 .. n-1
      }
    }
    return n;
  });
}

// The field made of a sample group's members: bytes, each member's elements in C order and
// little-endian, all members of member "0"'s dtype.
Inspected inspect_members(const H5::H5File& file, const std::string& group, const std::string& name, std::uint64_t n,
                          const std::string& path, DType& member_dtype) {
  const std::string ctx = fmt::format("{}: group '{}'", path, group);
  const auto context = [&] { return ctx; };
  return hdf5_call(context, [&] {
    const H5::DataSet first = file.openDataSet(group + "/0");
    const TypeMatch m = match_type(first);
    if (!m.numeric) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: member '0' holds {}; the members of a sample group must be numeric datasets ({})",
                              ctx, m.why.empty() ? "variable-length data" : m.why, kSupported));
    }
    member_dtype = *m.dtype;
    Inspected out;
    out.dims = {n};
    out.field = Field::bytes_field(name);
    return out;
  });
}

H5::DataSet open_dataset(const H5::H5File& file, const std::string& name, const std::string& path,
                         const H5::DSetAccPropList& dapl = H5::DSetAccPropList::DEFAULT) {
  return hdf5_call([&] { return fmt::format("{}: dataset '{}'", path, name); },
                   [&] { return file.openDataSet(name, dapl); });
}

// Checks that every level of `group` ("a/b/c") exists; the error names the first that does not and
// what its parent holds, after `prefix` (e.g. "unknown field 'x': ").
void require_group(const H5::H5File& file, const std::string& path, const std::string& group,
                   const std::string& prefix) {
  std::string parent;
  for (std::size_t start = 0; start <= group.size();) {
    const auto end = std::min(group.find('/', start), group.size());
    const std::string part = group.substr(start, end - start);
    const GroupListing up = list_group(file, parent, path);
    if (std::find(up.groups.begin(), up.groups.end(), part) == up.groups.end()) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: {}no group '{}' ({})", path, prefix, parent.empty() ? part : parent + "/" + part,
                              describe_listing(up, parent)));
    }
    parent = parent.empty() ? part : parent + "/" + part;
    start = end + 1;
  }
}

// Where a field comes from: a dataset, or a sample group of `members` members.
struct FieldSource {
  std::string name;    // as delivered: relative to the reader's group
  std::string object;  // path in the file
  std::uint64_t members = 0;
};

// The fields that make up the schema: `wanted` (names, or paths like "train/images", relative to
// `group`) if given, else every dataset and sample group in `group`, which must then all be
// deliverable: a dataset is never dropped silently.
std::vector<FieldSource> field_sources(const H5::H5File& file, const std::string& path,
                                       const std::vector<std::string>& wanted, const std::string& group) {
  const std::string base = group.empty() ? "" : group + "/";
  if (!group.empty()) require_group(file, path, group, "");
  std::vector<FieldSource> out;
  if (!wanted.empty()) {
    for (std::size_t i = 0; i < wanted.size(); ++i) {
      const auto& w = wanted[i];
      if (std::find(wanted.begin(), wanted.begin() + static_cast<std::ptrdiff_t>(i), w) !=
          wanted.begin() + static_cast<std::ptrdiff_t>(i)) {
        throw Error(ErrorCode::dataset, fmt::format("{}: field '{}' is selected twice", path, w));
      }
      const std::string full = base + w;
      const auto slash = full.find_last_of('/');
      const std::string parent_group = slash == std::string::npos ? "" : full.substr(0, slash);
      const std::string leaf = slash == std::string::npos ? full : full.substr(slash + 1);
      if (!parent_group.empty()) require_group(file, path, parent_group, fmt::format("unknown field '{}': ", w));
      const GroupListing here = list_group(file, parent_group, path);
      if (std::find(here.datasets.begin(), here.datasets.end(), leaf) != here.datasets.end()) {
        out.push_back({w, full, 0});
        continue;
      }
      if (std::find(here.groups.begin(), here.groups.end(), leaf) != here.groups.end()) {
        const std::uint64_t n = sample_group_size(file, full, path);
        if (n == 0) {
          throw Error(ErrorCode::dataset,
                      fmt::format("{}: field '{}' is a group whose members are not named 0 .. N-1 (a sample group); "
                                  "name the datasets in it instead ({})",
                                  path, w, describe_listing(list_group(file, full, path), full)));
        }
        out.push_back({w, full, n});
        continue;
      }
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: unknown field '{}' ({})", path, w, describe_listing(here, parent_group)));
    }
    return out;
  }
  const GroupListing here = list_group(file, group, path);
  std::vector<std::string> cannot;
  for (const auto& n : here.datasets) {
    const H5::DataSet dset = open_dataset(file, base + n, path);
    const TypeMatch m =
        hdf5_call([&] { return fmt::format("{}: dataset '{}'", path, base + n); }, [&] { return match_type(dset); });
    if (!m.deliverable()) cannot.push_back(fmt::format("'{}' ({})", n, m.why));
    out.push_back({n, base + n, 0});
  }
  std::vector<std::string> containers;
  for (const auto& g : here.groups) {
    if (const std::uint64_t members = sample_group_size(file, base + g, path)) {
      out.push_back({g, base + g, members});
    } else {
      containers.push_back(g);
    }
  }
  if (!cannot.empty()) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: cannot deliver every dataset of {}: {}; name the fields to load "
                            "(--fields / Options::fields) from: {}",
                            path, group_label(group), fmt::join(cannot, ", "), describe_listing(here, group)));
  }
  if (out.empty()) {
    std::string example;
    if (!containers.empty()) {
      const GroupListing first = list_group(file, base + containers.front(), path);
      std::vector<std::string> paths;
      for (const auto& d : first.datasets) paths.push_back(containers.front() + "/" + d);
      if (!paths.empty()) {
        example = fmt::format(", e.g. --fields {} or --group {}", fmt::join(paths, ","), base + containers.front());
      }
    }
    throw Error(ErrorCode::dataset,
                fmt::format("{}: no datasets in {} (groups: {}); name the fields by path{}", path, group_label(group),
                            containers.empty() ? "none" : fmt::format("{}", fmt::join(containers, ", ")), example));
  }
  std::sort(out.begin(), out.end(), [](const FieldSource& a, const FieldSource& b) { return a.name < b.name; });
  return out;
}

void check_same_n(const std::vector<Inspected>& cols, const std::string& path) {
  for (const auto& c : cols) {
    if (c.dims[0] != cols.front().dims[0]) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: fields with different numbers of samples: '{}' has {}, '{}' has {}", path,
                              cols.front().field.name, cols.front().dims[0], c.field.name, c.dims[0]));
    }
  }
}

bool is_prime(std::size_t n) {
  for (std::size_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return n >= 2;
}

}  // namespace

Schema hdf5_schema(const std::string& path, const std::vector<std::string>& wanted, const std::string& group) {
  Hdf5Quiet quiet;
  const H5::H5File file = open_file(path);
  std::vector<Inspected> cols;
  for (const auto& src : field_sources(file, path, wanted, group)) {
    DType member_dtype;
    cols.push_back(src.members ? inspect_members(file, src.object, src.name, src.members, path, member_dtype)
                               : inspect(open_dataset(file, src.object, path), src.name, path));
  }
  check_same_n(cols, path);
  Schema s;
  s.num_samples = cols.front().dims[0];
  for (auto& c : cols) s.fields.push_back(std::move(c.field));
  s.validate(path);
  return s;
}

struct Hdf5Reader::Impl {
  std::string path;
  H5::H5File file;
  detail::UniqueFd fd;  // for the direct path
  Schema schema;
  std::vector<Column> columns;

  void open_column(const FieldSource& src, Hdf5Path mode);
  void read_vlen(Column& c, std::uint64_t start, std::uint64_t count, VarBytes& out);
  void read_member(Column& c, std::uint64_t i, VarBytes& out);
  std::uint64_t member_bytes(Column& c, std::uint64_t i);
  void read_hdf5(Column& c, std::uint64_t start, std::uint64_t count, std::byte* dst);
  void read_direct(Column& c, std::uint64_t start, std::uint64_t count, std::byte* dst);
  void read_inflated(Column& c, std::uint64_t start, std::uint64_t count, std::byte* dst);
  void fill_rows(const Column& c, std::uint64_t n, std::byte* dst) const;
  haddr_t chunk_address(Column& c, std::uint64_t chunk);
  // Reads a few samples through `path` and through H5Dread; false when they differ or `path` fails.
  template <class Path>
  bool matches_hdf5(Column& c, Path path);
};

void Hdf5Reader::Impl::open_column(const FieldSource& src, Hdf5Path mode) {
  const std::string& name = src.object;
  const std::string ctx = fmt::format("{}: dataset '{}'", path, name);
  Column c;
  c.object = src.object;
  if (src.members) {
    Inspected in = inspect_members(file, src.object, src.name, src.members, path, c.member_dtype);
    c.source = Column::Source::members;
    c.field = std::move(in.field);
    c.dims = std::move(in.dims);
    c.where = fmt::format("{}: group '{}'", path, src.object);
    columns.push_back(std::move(c));
    return;
  }
  // Inspect with default access properties first: the chunk cache is chosen from the layout.
  H5::DSetCreatPropList dcpl;
  {
    const H5::DataSet probe = open_dataset(file, name, path);
    Inspected in = inspect(probe, src.name, path);
    c.field = std::move(in.field);
    c.dims = std::move(in.dims);
    dcpl = hdf5_call([&] { return ctx; }, [&] { return probe.getCreatePlist(); });
  }
  if (c.field.is_bytes()) {
    c.source = Column::Source::vlen;
    c.where = ctx;
    const auto context = [&] { return ctx; };
    hdf5_call(context, [&] {
      c.dset = file.openDataSet(name);
      c.file_space = c.dset.getSpace();
      c.mem_type = H5::VarLenType(H5::PredType::NATIVE_UINT8);
    });
    columns.push_back(std::move(c));
    return;
  }
  c.sample_bytes = c.field.bytes_per_sample();
  c.where = ctx;
  const auto context = [&] { return ctx; };
  hdf5_call(context, [&] {
    const H5D_layout_t layout = dcpl.getLayout();
    const int nfilters = dcpl.getNfilters();
    const int rank = static_cast<int>(c.dims.size());
    std::vector<hsize_t> chunk(c.dims.size(), 0);
    if (layout == H5D_CHUNKED) dcpl.getChunk(rank, chunk.data());

    H5::DSetAccPropList dapl;
    if (layout == H5D_CHUNKED) {
      c.chunk_rows = chunk[0];
      std::size_t chunk_bytes = dtype_size(c.field.dtype);
      for (auto d : chunk) chunk_bytes *= d;
      // Unfiltered chunks are read in place, so a cache only costs a copy. Filtered chunks are
      // inflated whole: keep a few so that neighbouring samples in one batch inflate a chunk once.
      // HDF5 1.10 does not hold its cache to rdcc_nbytes when there are more hash slots than
      // chunks fit (measured: a 6 MiB cache with 521 slots grew to the whole 300 MB dataset), so
      // the slot count, a prime just above the chunks that fit, is what bounds it: a colliding
      // chunk evicts.
      const std::size_t cache = nfilters > 0 ? std::clamp<std::size_t>(chunk_bytes * 8, chunk_bytes, 64u << 20) : 0;
      std::size_t slots = cache / std::max<std::size_t>(chunk_bytes, 1) + 1;
      while (!is_prime(slots)) ++slots;
      dapl.setChunkCache(slots, cache, 1.0);
    }
    c.dset = file.openDataSet(name, dapl);
    c.file_space = c.dset.getSpace();
    c.mem_type = little_endian_type_of(c.dset);
    const H5::DataType file_type = c.dset.getDataType();

    const bool eligible =
        mode == Hdf5Path::automatic && nfilters == 0 && file_type == c.mem_type && dcpl.getExternalCount() == 0;
    if (eligible && layout == H5D_CONTIGUOUS) {
      try {
        c.contiguous_offset = c.dset.getOffset();
      } catch (const H5::Exception&) {
        H5Eclear2(H5E_DEFAULT);
        c.contiguous_offset = HADDR_UNDEF;
      }
      c.direct = c.contiguous_offset != HADDR_UNDEF;  // unallocated: HDF5 delivers the fill value
    } else if (layout == H5D_CHUNKED && chunk[0] > 0 && mode == Hdf5Path::automatic && file_type == c.mem_type &&
               dcpl.getExternalCount() == 0) {
      bool whole_samples = true;
      for (int d = 1; d < rank; ++d) whole_samples = whole_samples && chunk[d] == c.dims[d];
      bool deflate_only = false;
      if (nfilters == 1) {
        unsigned flags = 0, config = 0;
        std::size_t nelmts = 0;
        char filter_name[64];
        deflate_only =
            dcpl.getFilter(0, flags, nelmts, nullptr, sizeof filter_name, filter_name, config) == H5Z_FILTER_DEFLATE;
      }
      if (whole_samples && (nfilters == 0 || deflate_only)) {
        c.chunked = true;
        c.rows_per_chunk = chunk[0];
        c.fill_sample.resize(c.sample_bytes);
        std::vector<std::byte> one(dtype_size(c.field.dtype));
        dcpl.getFillValue(c.mem_type, one.data());
        for (std::size_t off = 0; off < c.sample_bytes; off += one.size()) {
          std::memcpy(c.fill_sample.data() + off, one.data(), one.size());
        }
        if (nfilters == 0) {
          c.chunk_addr.assign((c.dims[0] + chunk[0] - 1) / chunk[0], kNotLookedUp);
          c.direct = true;
        } else if (c.rows_per_chunk <= kMaxSampleBytes / c.sample_bytes) {
          // The same few chunks HDF5's cache would have kept (8, at most 64 MiB), inflated by
          // libdeflate; a chunk larger than a sample may be is left to HDF5.
          const std::size_t chunk_bytes = c.rows_per_chunk * c.sample_bytes;
          c.inflated = std::make_unique<InflatedChunks>(
              chunk_bytes, std::clamp<std::size_t>((64u << 20) / std::max<std::size_t>(chunk_bytes, 1), 1, 8));
        }
      }
    }
  });
  columns.push_back(std::move(c));
  Column& added = columns.back();
  auto direct = [&](Column& col, std::uint64_t i, std::byte* out) { read_direct(col, i, 1, out); };
  auto inflate = [&](Column& col, std::uint64_t i, std::byte* out) { read_inflated(col, i, 1, out); };
  if (added.direct && !matches_hdf5(added, direct)) added.direct = false;
  if (added.inflated && !matches_hdf5(added, inflate)) added.inflated.reset();
}

void Hdf5Reader::Impl::fill_rows(const Column& c, std::uint64_t n, std::byte* dst) const {
  for (std::uint64_t k = 0; k < n; ++k) std::memcpy(dst + k * c.sample_bytes, c.fill_sample.data(), c.sample_bytes);
}

void Hdf5Reader::Impl::read_inflated(Column& c, std::uint64_t start, std::uint64_t count, std::byte* dst) {
  std::vector<hsize_t> offset(c.dims.size(), 0);
  while (count > 0) {
    const std::uint64_t chunk = start / c.rows_per_chunk;
    const std::uint64_t row = start % c.rows_per_chunk;
    const std::uint64_t n = std::min<std::uint64_t>(count, c.rows_per_chunk - row);
    offset[0] = chunk * c.rows_per_chunk;
    const std::byte* rows = c.inflated->get(c.dset.getId(), chunk, offset, c.where);
    if (rows) {
      std::memcpy(dst, rows + row * c.sample_bytes, n * c.sample_bytes);
    } else {
      fill_rows(c, n, dst);
    }
    dst += n * c.sample_bytes;
    start += n;
    count -= n;
  }
}

haddr_t Hdf5Reader::Impl::chunk_address(Column& c, std::uint64_t chunk) {
  haddr_t& addr = c.chunk_addr[chunk];
  if (addr == kNotLookedUp) {
    std::vector<hsize_t> offset(c.dims.size(), 0);
    offset[0] = chunk * c.rows_per_chunk;
    unsigned filter_mask = 0;
    haddr_t a = HADDR_UNDEF;
    hsize_t size = 0;
    // No C++ call for a chunk's address.
    if (H5Dget_chunk_info_by_coord(c.dset.getId(), offset.data(), &filter_mask, &a, &size) < 0) {
      throw_hdf5(fmt::format("{}: dataset '{}': locating chunk {}", path, c.field.name, chunk));
    }
    addr = a;  // HADDR_UNDEF: never written, reads as the fill value
  }
  return addr;
}

void Hdf5Reader::Impl::read_direct(Column& c, std::uint64_t start, std::uint64_t count, std::byte* dst) {
  if (!c.chunked) {
    detail::pread_exact(fd.get(), dst, count * c.sample_bytes,
                        static_cast<off_t>(c.contiguous_offset + start * c.sample_bytes), path);
    return;
  }
  while (count > 0) {
    std::uint64_t chunk = start / c.rows_per_chunk;
    std::uint64_t row = start % c.rows_per_chunk;
    std::uint64_t n = std::min<std::uint64_t>(count, c.rows_per_chunk - row);
    haddr_t addr = chunk_address(c, chunk);
    if (addr == HADDR_UNDEF) {
      fill_rows(c, n, dst);
    } else {
      detail::pread_exact(fd.get(), dst, n * c.sample_bytes, static_cast<off_t>(addr + row * c.sample_bytes), path);
    }
    dst += n * c.sample_bytes;
    start += n;
    count -= n;
  }
}

void Hdf5Reader::Impl::read_hdf5(Column& c, std::uint64_t start, std::uint64_t count, std::byte* dst) {
  std::vector<hsize_t> offset(c.dims.size(), 0), extent = c.dims;
  offset[0] = start;
  extent[0] = count;
  hdf5_call(
      [&] {
        return fmt::format("{}: dataset '{}': reading samples {}..{}", path, c.field.name, start, start + count - 1);
      },
      [&] {
        c.file_space.selectHyperslab(H5S_SELECT_SET, extent.data(), offset.data());
        const H5::DataSpace mem_space(static_cast<int>(extent.size()), extent.data());
        c.dset.read(dst, c.mem_type, mem_space, c.file_space);
      });
}

template <class Path>
bool Hdf5Reader::Impl::matches_hdf5(Column& c, Path path_read) {
  std::vector<std::byte> a(c.sample_bytes), b(c.sample_bytes);
  for (hsize_t i : {hsize_t{0}, c.dims[0] / 2, c.dims[0] - 1}) {
    try {
      path_read(c, i, a.data());
    } catch (const Error&) {
      return false;  // e.g. an offset past the end, or a chunk HDF5 reads differently: HDF5 knows better
    }
    read_hdf5(c, i, 1, b.data());
    if (a != b) return false;
  }
  return true;
}

Hdf5Reader::Hdf5Reader(const std::string& path, const std::vector<std::string>& fields, Hdf5Path path_mode,
                       const std::string& group, bool sequential)
    : impl_(std::make_unique<Impl>()) {
  Hdf5Quiet quiet;
  impl_->path = path;
  impl_->file = open_file(path);
  impl_->fd = detail::UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!impl_->fd) detail::throw_errno(path, ErrorCode::dataset);
  // A read of a sample not yet cached would otherwise fetch up to 4x its size around it: on a
  // shuffled epoch, pages nobody reads. A hint: its result does not matter.
  if (!sequential) (void)::posix_fadvise(impl_->fd.get(), 0, 0, POSIX_FADV_RANDOM);
  for (const auto& src : field_sources(impl_->file, path, fields, group)) impl_->open_column(src, path_mode);
  std::vector<Inspected> dims;
  for (const auto& c : impl_->columns) dims.push_back({c.field, c.dims});
  check_same_n(dims, path);
  impl_->schema.num_samples = impl_->columns.front().dims[0];
  for (const auto& c : impl_->columns) impl_->schema.fields.push_back(c.field);
  impl_->schema.validate(path);
}

Hdf5Reader::~Hdf5Reader() {
  Hdf5Quiet quiet;
  impl_.reset();
}

const Schema& Hdf5Reader::schema() const { return impl_->schema; }

bool Hdf5Reader::reads_directly(std::size_t f) const { return impl_->columns.at(f).direct; }

bool Hdf5Reader::inflates(std::size_t f) const { return impl_->columns.at(f).inflated != nullptr; }

std::uint64_t Hdf5Reader::chunks_inflated() const {
  std::uint64_t n = 0;
  for (const auto& c : impl_->columns) n += c.inflated ? c.inflated->inflated() : 0;
  return n;
}

std::uint64_t Hdf5Reader::rows_per_chunk(std::size_t f) const { return impl_->columns.at(f).chunk_rows; }

void Hdf5Reader::will_need(std::span<const std::uint64_t> indices) noexcept {
  Hdf5Quiet quiet;
  const int fd = impl_->fd.get();
  detail::Env& env = detail::Env::get();
  for (auto& c : impl_->columns) {
    try {
      if (c.direct && !c.chunked) {
        for (std::uint64_t i : indices) {
          (void)env.posix_fadvise(fd, static_cast<off_t>(c.contiguous_offset + i * c.sample_bytes),
                                  static_cast<off_t>(c.sample_bytes), POSIX_FADV_WILLNEED);
        }
      } else if (c.direct) {
        for (std::uint64_t i : indices) {
          const haddr_t addr = impl_->chunk_address(c, i / c.rows_per_chunk);
          if (addr == HADDR_UNDEF) continue;
          (void)env.posix_fadvise(fd, static_cast<off_t>(addr + (i % c.rows_per_chunk) * c.sample_bytes),
                                  static_cast<off_t>(c.sample_bytes), POSIX_FADV_WILLNEED);
        }
      } else if (c.inflated) {
        std::vector<hsize_t> offset(c.dims.size(), 0);
        std::uint64_t last = UINT64_MAX;
        for (std::uint64_t i : indices) {
          const std::uint64_t chunk = i / c.rows_per_chunk;
          if (chunk == last) continue;
          last = chunk;
          offset[0] = chunk * c.rows_per_chunk;
          unsigned mask = 0;
          haddr_t addr = HADDR_UNDEF;
          hsize_t size = 0;
          if (H5Dget_chunk_info_by_coord(c.dset.getId(), offset.data(), &mask, &addr, &size) >= 0 &&
              addr != HADDR_UNDEF) {
            (void)env.posix_fadvise(fd, static_cast<off_t>(addr), static_cast<off_t>(size), POSIX_FADV_WILLNEED);
          }
        }
      }
    } catch (const std::exception&) {
      // A hint only: read() reports whatever is wrong.
    }
  }
  H5Eclear2(H5E_DEFAULT);
}

std::uint64_t Hdf5Reader::locality_rows() const {
  const Column* largest = nullptr;
  for (const auto& c : impl_->columns) {
    if (c.chunk_rows > 0 && (!largest || c.sample_bytes > largest->sample_bytes)) largest = &c;
  }
  return largest ? largest->chunk_rows : Reader::locality_rows();
}

void Hdf5Reader::Impl::read_vlen(Column& c, std::uint64_t start, std::uint64_t count, VarBytes& out) {
  hvl_t staged[64];  // read in runs of at most 64 samples: no allocation per batch
  while (count > 0) {
    const hsize_t n = std::min<std::uint64_t>(count, std::size(staged));
    hdf5_call([&] { return fmt::format("{}: reading samples {}..{}", c.where, start, start + n - 1); },
              [&] {
                hsize_t offset = start, extent = n;
                c.file_space.selectHyperslab(H5S_SELECT_SET, &extent, &offset);
                const H5::DataSpace mem_space(1, &extent);
                c.dset.read(staged, c.mem_type, mem_space, c.file_space);
                // HDF5 allocated each sample's bytes: give them back even when copying fails.
                struct Reclaim {
                  const H5::DataType& type;
                  const H5::DataSpace& space;
                  hvl_t* buf;
                  ~Reclaim() { H5Dvlen_reclaim(type.getId(), space.getId(), H5P_DEFAULT, buf); }
                } reclaim{c.mem_type, mem_space, staged};
                for (hsize_t k = 0; k < n; ++k) {
                  if (staged[k].len > kMaxSampleBytes) {
                    throw Error(
                        ErrorCode::dataset,
                        fmt::format("{}: sample {} holds {} bytes, more than a sample may ({} bytes, kMaxSampleBytes)",
                                    c.where, start + k, staged[k].len, kMaxSampleBytes));
                  }
                  std::byte* dst = out.append(staged[k].len);
                  if (staged[k].len) std::memcpy(dst, staged[k].p, staged[k].len);
                }
              });
    start += n;
    count -= n;
  }
}

std::uint64_t Hdf5Reader::Impl::member_bytes(Column& c, std::uint64_t i) {
  const auto context = [&] { return fmt::format("{}: sample {}", c.where, i); };
  return hdf5_call(context, [&]() -> std::uint64_t {
    const H5::DataSet d = file.openDataSet(fmt::format("{}/{}", c.object, i));
    return static_cast<std::uint64_t>(d.getSpace().getSimpleExtentNpoints()) * dtype_size(c.member_dtype);
  });
}

void Hdf5Reader::Impl::read_member(Column& c, std::uint64_t i, VarBytes& out) {
  const auto where = [&] { return fmt::format("{}: sample {} (member '{}')", c.where, i, i); };
  const H5::DataSet d = hdf5_call(where, [&] { return file.openDataSet(fmt::format("{}/{}", c.object, i)); });
  const TypeMatch m = hdf5_call(where, [&] { return match_type(d); });
  if (!m.dtype || *m.dtype != c.member_dtype) {
    throw Error(ErrorCode::dataset,
                fmt::format("{} is {}, but the group's member '0' is {}: a sample group's members share one dtype",
                            where(), m.dtype ? std::string(dtype_name(*m.dtype)) : m.why, dtype_name(c.member_dtype)));
  }
  const auto elements =
      hdf5_call(where, [&] { return static_cast<std::uint64_t>(d.getSpace().getSimpleExtentNpoints()); });
  if (elements > kMaxSampleBytes / dtype_size(c.member_dtype)) {
    throw Error(ErrorCode::dataset,
                fmt::format("{} holds {} elements, more than a sample may ({} bytes, kMaxSampleBytes)", where(),
                            elements, kMaxSampleBytes));
  }
  std::byte* dst = out.append(elements * dtype_size(c.member_dtype));
  try {
    if (elements) hdf5_call(where, [&] { d.read(dst, little_endian_type_of(d)); });
  } catch (...) {
    out.pop_back();
    throw;
  }
}

std::string Hdf5Reader::describe_layout() const {
  std::vector<std::string> parts;
  for (const auto& c : impl_->columns) {
    if (c.source == Column::Source::members) {
      parts.push_back(fmt::format("'{}': group '{}' of {} datasets '0' .. '{}' ({}), one sample each", c.field.name,
                                  c.object, c.dims[0], c.dims[0] - 1, dtype_name(c.member_dtype)));
    } else if (c.source == Column::Source::vlen) {
      parts.push_back(fmt::format("'{}': variable-length u8 dataset '{}'", c.field.name, c.object));
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
  VarBytes one;
  for (std::uint64_t p = 0; p < probes; ++p) {
    const std::uint64_t i = p * (n - 1) / std::max<std::uint64_t>(probes - 1, 1);
    if (c.source == Column::Source::members) {
      largest = std::max(largest, impl_->member_bytes(c, i));
    } else {
      one.clear();
      impl_->read_vlen(c, i, 1, one);
      largest = std::max<std::uint64_t>(largest, one.total());
    }
  }
  return {std::max<std::uint64_t>(2 * largest, 4096), false};
}

void Hdf5Reader::read(std::span<const std::uint64_t> indices, std::span<const FieldOut> out) {
  Hdf5Quiet quiet;
  const std::uint64_t n = impl_->schema.num_samples;
  for (std::size_t f = 0; f < impl_->columns.size(); ++f) {
    Column& c = impl_->columns[f];
    std::byte* dst = out[f].fixed;
    for (std::size_t k = 0; k < indices.size();) {
      std::uint64_t start = indices[k];
      if (start >= n) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: sample {} is out of range ({} samples)", impl_->path, start, n));
      }
      std::size_t run = 1;
      while (k + run < indices.size() && indices[k + run] == start + run) ++run;
      if (start + run > n)
        throw Error(ErrorCode::dataset, fmt::format("{}: sample {} is out of range ({} samples)", impl_->path, n, n));
      if (c.source == Column::Source::members) {
        for (std::size_t r = 0; r < run; ++r) impl_->read_member(c, start + r, *out[f].bytes);
      } else if (c.source == Column::Source::vlen) {
        impl_->read_vlen(c, start, run, *out[f].bytes);
      } else if (c.direct || c.inflated) {
        // Reads of the file itself: an OS error (EIO, a truncated file) names the dataset and samples.
        try {
          if (c.direct) {
            impl_->read_direct(c, start, run, dst);
          } else {
            impl_->read_inflated(c, start, run, dst);
          }
        } catch (const Error& e) {
          throw Error(ErrorCode::dataset,
                      fmt::format("{}: samples {}..{}: {}", c.where, start, start + run - 1, e.what()));
        }
      } else {
        impl_->read_hdf5(c, start, run, dst);
      }
      if (dst) dst += run * c.sample_bytes;
      k += run;
    }
  }
}

}  // namespace stoker::formats
