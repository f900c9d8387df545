#include "formats/hdf5/hdf5_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <lmdb.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <tuple>

#include "formats/hdf5/hdf5_schema.h"
#include "formats/hdf5/inflated_chunks.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_reader.h"
#include "formats/lmdb/lmdb_writer.h"
#include "formats/open_reader.h"
#include "loader/plan/quasi_random.h"
#include "loader/plan/shuffle.h"
#include "stoker/error.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using formats::Hdf5WriteOptions;
using ::testing::HasSubstr;
using ::testing::Not;

// Reads `indices` through `r` and checks every byte against the generator.
void expect_reads(formats::Reader& r, const std::vector<std::uint64_t>& indices) {
  const Schema& s = r.schema();
  std::vector<std::vector<std::byte>> bufs;
  std::vector<std::byte*> dest;
  for (const auto& f : s.fields) bufs.emplace_back(indices.size() * f.bytes_per_sample());
  for (auto& b : bufs) dest.push_back(b.data());
  r.read(indices, dest);
  for (std::size_t f = 0; f < s.fields.size(); ++f) {
    const std::size_t b = s.fields[f].bytes_per_sample();
    for (std::size_t k = 0; k < indices.size(); ++k) {
      auto want = expected_field(s.fields[f], indices[k]);
      ASSERT_EQ(0, std::memcmp(bufs[f].data() + k * b, want.data(), b))
          << "field " << s.fields[f].name << " sample " << indices[k];
    }
  }
}

struct Layout {
  const char* name;
  Hdf5WriteOptions options;
  bool direct;
};

void PrintTo(const Layout& l, std::ostream* os) { *os << l.name; }

class Hdf5Layouts : public ::testing::TestWithParam<Layout> {};

TEST_P(Hdf5Layouts, EveryDtypeReadsExactly) {
  TempDir tmp;
  Schema schema = all_dtypes_schema(100);
  write_hdf5(tmp.path("d.h5"), schema, GetParam().options);
  for (auto mode : {formats::Hdf5Path::automatic, formats::Hdf5Path::hdf5_only}) {
    formats::Hdf5Reader r(tmp.path("d.h5"), {}, mode);
    ASSERT_EQ(r.schema(), schema);
    for (std::size_t f = 0; f < schema.fields.size(); ++f) {
      EXPECT_EQ(r.reads_directly(f), mode == formats::Hdf5Path::automatic && GetParam().direct) << f;
      // gzip chunks are inflated by libdeflate on the automatic path.
      EXPECT_EQ(r.inflates(f), mode == formats::Hdf5Path::automatic && GetParam().options.gzip_level > 0) << f;
    }
    expect_reads(r, kMixedIndices);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Hdf5Layouts,
                         ::testing::Values(Layout{"contiguous", {Hdf5WriteOptions::Layout::contiguous, 0, 0}, true},
                                           Layout{"chunked", {Hdf5WriteOptions::Layout::chunked, 7, 0}, true},
                                           Layout{"chunked_gzip", {Hdf5WriteOptions::Layout::chunked, 16, 4}, false}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

// Raw HDF5 helpers for files stoker's writer would never make.
struct RawH5 {
  hid_t file;
  explicit RawH5(const std::string& path) : file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {}
  ~RawH5() { H5Fclose(file); }
  void dataset(const char* name, hid_t type, std::vector<hsize_t> dims, const void* data = nullptr,
               hid_t dcpl = H5P_DEFAULT) {
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (data) H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(d);
    H5Sclose(space);
  }
};

TEST(Hdf5Reader, UnwrittenChunksReadAsTheFillValueOnBothPaths) {
  TempDir tmp;
  {
    RawH5 f(tmp.path("sparse.h5"));
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk[2] = {8, 3};
    H5Pset_chunk(dcpl, 2, chunk);
    std::int32_t fill = -7;
    H5Pset_fill_value(dcpl, H5T_NATIVE_INT32, &fill);
    f.dataset("x", H5T_STD_I32LE, {100, 3}, nullptr, dcpl);
    H5Pclose(dcpl);
    hid_t d = H5Dopen2(f.file, "x", H5P_DEFAULT);
    hid_t space = H5Dget_space(d);
    hsize_t start[2] = {0, 0}, count[2] = {10, 3};
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
    hid_t mem = H5Screate_simple(2, count, nullptr);
    std::vector<std::int32_t> v(30);
    for (int i = 0; i < 30; ++i) v[i] = i;
    H5Dwrite(d, H5T_NATIVE_INT32, mem, space, H5P_DEFAULT, v.data());
    H5Sclose(mem);
    H5Sclose(space);
    H5Dclose(d);
  }
  for (auto mode : {formats::Hdf5Path::automatic, formats::Hdf5Path::hdf5_only}) {
    formats::Hdf5Reader r(tmp.path("sparse.h5"), {}, mode);
    EXPECT_EQ(r.reads_directly(0), mode == formats::Hdf5Path::automatic);
    std::vector<std::uint64_t> idx{3, 9, 10, 55, 99};
    std::vector<std::int32_t> out(15);
    std::byte* dest[1] = {reinterpret_cast<std::byte*>(out.data())};
    r.read(idx, dest);
    EXPECT_EQ(out, (std::vector<std::int32_t>{9, 10, 11, 27, 28, 29, -7, -7, -7, -7, -7, -7, -7, -7, -7}));
  }
}

TEST(Hdf5Reader, DefaultFieldsAreEveryRootDatasetAndNoneIsDroppedSilently) {
  TempDir tmp;
  {
    RawH5 f(tmp.path("mixed.h5"));
    f.dataset("zeta", H5T_STD_I16LE, {20});
    f.dataset("alpha", H5T_STD_U8LE, {20, 2});
    H5Gclose(H5Gcreate2(f.file, "group", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  }
  Schema s = formats::hdf5_schema(tmp.path("mixed.h5"));
  ASSERT_EQ(s.fields.size(), 2u);
  EXPECT_EQ(s.fields[0].name, "alpha");
  EXPECT_EQ(s.fields[0].shape, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(s.fields[1].name, "zeta");
  EXPECT_EQ(s.num_samples, 20u);
  // An explicit selection sets the order.
  formats::Hdf5Reader r(tmp.path("mixed.h5"), {"zeta", "alpha"}, formats::Hdf5Path::automatic);
  EXPECT_EQ(r.schema().fields[0].name, "zeta");
  // A dataset stoker cannot deliver is an error naming it, never a field quietly left out.
  {
    RawH5 f(tmp.path("compound.h5"));
    f.dataset("label", H5T_STD_I64LE, {20});
    hid_t pair = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(pair, "a", 0, H5T_STD_I32LE);
    H5Tinsert(pair, "b", 4, H5T_STD_I32LE);
    f.dataset("pairs", pair, {20});
    H5Tclose(pair);
  }
  try {
    formats::hdf5_schema(tmp.path("compound.h5"));
    FAIL() << "a compound dataset was left out silently";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::dataset) << e.what();
    EXPECT_THAT(e.what(),
                HasSubstr("cannot deliver every dataset of the root group: 'pairs' (a compound type, not numbers)"));
    EXPECT_THAT(e.what(), HasSubstr("name the fields to load"));
    EXPECT_THAT(e.what(), HasSubstr("datasets in the root group: label, pairs"));
  }
  EXPECT_EQ(formats::hdf5_schema(tmp.path("compound.h5"), {"label"}).fields.size(), 1u);
  // Strings are delivered as bytes fields (their values: tests/python/test_text.py).
  {
    RawH5 f(tmp.path("strings.h5"));
    f.dataset("label", H5T_STD_I64LE, {20});
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, 8);
    f.dataset("names", str, {20});
    H5Tclose(str);
  }
  const Schema strings = formats::hdf5_schema(tmp.path("strings.h5"));
  ASSERT_EQ(strings.fields.size(), 2u);
  EXPECT_EQ(strings.fields[1].describe(), "names: bytes");
  // Variable-length numbers are bytes fields of their values' dtype, whatever their byte order;
  // one of a width stoker has no dtype for is its bytes.
  {
    RawH5 f(tmp.path("vlen.h5"));
    const std::pair<const char*, hid_t> bases[] = {
        {"a_tokens", H5T_STD_I32LE}, {"b_scores", H5T_IEEE_F64BE}, {"c_ids", H5T_STD_U16BE}, {"d_bytes", H5T_STD_U8LE}};
    for (const auto& [name, base] : bases) {
      hid_t vlen = H5Tvlen_create(base);
      f.dataset(name, vlen, {20});
      H5Tclose(vlen);
    }
    hid_t odd = H5Tcopy(H5T_STD_I32LE);
    H5Tset_precision(odd, 24);
    hid_t vlen = H5Tvlen_create(odd);
    f.dataset("e_odd", vlen, {20});
    H5Tclose(vlen);
    H5Tclose(odd);
  }
  const Schema vlen = formats::hdf5_schema(tmp.path("vlen.h5"));
  ASSERT_EQ(vlen.fields.size(), 5u);
  EXPECT_EQ(vlen.fields[0], Field::bytes_field("a_tokens", DType::i32));
  EXPECT_EQ(vlen.fields[0].describe(), "a_tokens: variable-length i32");
  EXPECT_EQ(vlen.fields[1], Field::bytes_field("b_scores", DType::f64));
  EXPECT_EQ(vlen.fields[2], Field::bytes_field("c_ids", DType::u16));
  EXPECT_EQ(vlen.fields[3], Field::bytes_field("d_bytes"));
  EXPECT_EQ(vlen.fields[4], Field::bytes_field("e_odd"));
}

// bfloat16 as a 2-byte opaque type tagged "bfloat16" (docs/hdf5.md): delivered as its bytes.
TEST(Hdf5Reader, TaggedOpaqueBfloat16IsBf16) {
  TempDir tmp;
  const std::string p = tmp.path("bf16.h5");
  std::vector<std::uint16_t> values(12);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint16_t>(0x3f80 + i);
  {
    RawH5 f(p);
    hid_t bf16 = H5Tcreate(H5T_OPAQUE, 2);
    H5Tset_tag(bf16, "bfloat16");
    f.dataset("w", bf16, {6, 2}, values.data());
    H5Tclose(bf16);
  }
  formats::Hdf5Reader r(p, {}, formats::Hdf5Path::automatic);
  ASSERT_EQ(r.schema().fields.size(), 1u);
  EXPECT_EQ(r.schema().fields[0].dtype, DType::bf16);
  std::vector<std::uint16_t> got(4);
  std::vector<std::byte*> dest{reinterpret_cast<std::byte*>(got.data())};
  const std::vector<std::uint64_t> idx{5, 1};
  r.read(idx, dest);
  EXPECT_EQ(got, (std::vector<std::uint16_t>{values[10], values[11], values[2], values[3]}));
}

TEST(Hdf5Reader, FieldsInGroupsAreNamedByPath) {
  TempDir tmp;
  const std::string p = tmp.path("groups.h5");
  {
    RawH5 f(p);
    hid_t train = H5Gcreate2(f.file, "train", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<std::uint8_t> images(10 * 3);
    for (std::size_t i = 0; i < images.size(); ++i) images[i] = static_cast<std::uint8_t>(i);
    std::vector<std::int64_t> labels(10);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(100 + i);
    hsize_t idims[2] = {10, 3}, ldims[1] = {10};
    hid_t is = H5Screate_simple(2, idims, nullptr), ls = H5Screate_simple(1, ldims, nullptr);
    hid_t id = H5Dcreate2(train, "images", H5T_STD_U8LE, is, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t ld = H5Dcreate2(train, "labels", H5T_STD_I64LE, ls, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(id, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images.data());
    H5Dwrite(ld, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data());
    for (hid_t h : {id, ld}) H5Dclose(h);
    for (hid_t h : {is, ls}) H5Sclose(h);
    H5Gclose(train);
  }
  // No datasets in the root: the error says which groups there are and how to name the fields.
  expect_error(ErrorCode::dataset, [&] { formats::hdf5_schema(p); },
               {p, "no datasets in the root group (groups: train)",
                "e.g. Options::fields = {\"train/images\", \"train/labels\"} or Options::group = \"train\""});
  formats::Hdf5Reader r(p, {"train/labels", "train/images"}, formats::Hdf5Path::automatic);
  ASSERT_EQ(r.schema().fields.size(), 2u);
  EXPECT_EQ(r.schema().fields[0].name, "train/labels");
  EXPECT_EQ(r.schema().num_samples, 10u);
  std::vector<std::int64_t> labels(2);
  std::vector<std::uint8_t> images(6);
  std::vector<std::byte*> dest{reinterpret_cast<std::byte*>(labels.data()),
                               reinterpret_cast<std::byte*>(images.data())};
  const std::vector<std::uint64_t> idx{7, 2};
  r.read(idx, dest);
  EXPECT_EQ(labels, (std::vector<std::int64_t>{107, 102}));
  EXPECT_EQ(images, (std::vector<std::uint8_t>{21, 22, 23, 6, 7, 8}));
  // A missing field lists what is at its level.
  expect_error(ErrorCode::invalid_option, [&] { formats::hdf5_schema(p, {"train/nope"}); },
               {"unknown field 'train/nope' (datasets in group 'train': images, labels; groups: none)"});
  expect_error(ErrorCode::invalid_option, [&] { formats::hdf5_schema(p, {"test/images"}); },
               {"unknown field 'test/images': no group 'test' (datasets in the root group: none; groups: train)"});
}

TEST(Hdf5Reader, BadInputsGiveClearErrors) {
  TempDir tmp;
  const std::string p = tmp.path("bad.h5");
  auto open = [&](std::vector<std::string> fields = {}) {
    formats::Hdf5Reader r(p, fields, formats::Hdf5Path::automatic);
  };
  expect_error(ErrorCode::dataset, open, {p, "No such file"});
  { std::ofstream(p) << "definitely not hdf5"; }
  expect_error(ErrorCode::dataset, open, {p, "not an HDF5 file"});
  {
    RawH5 f(p);
    f.dataset("image", H5T_STD_U8LE, {10, 4});
    f.dataset("label", H5T_STD_I64LE, {9});
  }
  expect_error(ErrorCode::dataset, open, {p, "different numbers of samples", "'image' has 10", "'label' has 9"});
  expect_error(ErrorCode::invalid_option,
               [&] {
                 open({"image", "nope"});
               },
               {p, "unknown field 'nope'", "image, label"});
  expect_error(ErrorCode::invalid_option, [&] { open({"image", "image"}); }, {p, "'image' is selected twice"});
  {
    RawH5 f(p);
    hid_t twelve_bits = H5Tcopy(H5T_STD_U16LE);  // a type no array library delivers
    H5Tset_precision(twelve_bits, 12);
    f.dataset("count", twelve_bits, {10});
    H5Tclose(twelve_bits);
  }
  expect_error(ErrorCode::dataset, open,
               {p, "dataset 'count'", "unsupported dtype (integer with 12 bits of precision in 2 bytes)",
                "stoker reads bool, u8"});
  {
    RawH5 f(p);
    f.dataset("empty", H5T_STD_U8LE, {0, 3});
  }
  expect_error(ErrorCode::dataset, open, {p, "dataset 'empty'", "empty"});
  {
    RawH5 f(p);
    hid_t pair = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(pair, "a", 0, H5T_STD_I32LE);
    H5Tinsert(pair, "b", 4, H5T_STD_I32LE);
    f.dataset("pairs", pair, {20});
    H5Tclose(pair);
  }
  expect_error(ErrorCode::dataset, open,
               {p, "cannot deliver every dataset of the root group: 'pairs' (a compound type, not numbers)"});
}

// Where the chunk of dataset 'image' holding sample `row` is stored: (address, bytes).
std::pair<haddr_t, hsize_t> image_chunk(const std::string& path, hsize_t row) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "image", H5P_DEFAULT);
  hsize_t offset[4] = {row, 0, 0, 0};
  unsigned mask = 0;
  haddr_t addr = HADDR_UNDEF;
  hsize_t size = 0;
  if (H5Dget_chunk_info_by_coord(d, offset, &mask, &addr, &size) < 0) addr = HADDR_UNDEF;
  H5Dclose(d);
  H5Fclose(f);
  return {addr, size};
}

// A chunk's stored size comes from the file's chunk index; HDF5 (and the inflate path) allocate it
// before reading. An index that claims 4 GB for a chunk of 960 bytes, or bytes past the end of the
// file, is refused before anything is allocated, naming the chunk. (Past the end of the file is
// checked too; HDF5 refuses to open most such files itself, as truncated.)
TEST(Hdf5Reader, AChunkClaimingMoreStoredBytesThanItCanHaveIsRefusedBeforeAnyAllocation) {
  TempDir tmp;
  const std::string p = tmp.path("claims.h5");
  Schema schema = small_schema(400);
  write_hdf5(p, schema, {formats::Hdf5WriteOptions::Layout::chunked, 16, 4});
  auto [addr, size] = image_chunk(p, 48);  // chunk 3 of 'image': samples 48..63
  ASSERT_NE(addr, HADDR_UNDEF);
  // Its key in the version-1 B-tree: the stored size (4 bytes), the filter mask (4), then the
  // chunk's offset in each dimension (8 bytes each): 48, 0, ...
  std::string file;
  {
    std::ifstream in(p, std::ios::binary);
    file.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto le = [](std::uint64_t v, int n) {
    std::string b;
    for (int i = 0; i < n; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
    return b;
  };
  const std::string key = le(size, 4) + le(0, 4) + le(48, 8);
  const auto at = file.find(key);
  ASSERT_NE(at, std::string::npos);
  ASSERT_EQ(file.find(key, at + 1), std::string::npos);
  file.replace(at, 4, le(0xF0000000u, 4));
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  std::vector<std::byte> buf(16 * schema.fields[0].bytes_per_sample());
  std::vector<std::byte*> dest{buf.data()};
  const std::vector<std::uint64_t> bad{50};
  formats::Hdf5Reader r(p, {"image"}, formats::Hdf5Path::automatic);
  ASSERT_TRUE(r.inflates(0));
  expect_error(ErrorCode::dataset, [&] { r.read(bad, dest); },
               {p + ": dataset 'image': samples 50..50: ",
                fmt::format("chunk 3 claims 4026531840 stored bytes at offset {}, more than a compressed chunk of "
                            "960 bytes can take ({}): the file is damaged",
                            addr, formats::InflatedChunks::deflate_bound(960))});
  // The other chunks still read.
  const std::vector<std::uint64_t> good{0, 1, 2};
  r.read(good, dest);
}

// HDF5's C++ API throws exceptions that say only which call failed; the reader keeps HDF5's own
// reason from its error stack and names the file, the dataset and the samples.
TEST(Hdf5Reader, ErrorsKeepHdf5sOwnDetail) {
  TempDir tmp;
  const std::string p = tmp.path("bad.h5");
  Schema schema = small_schema(400);
  write_hdf5(p, schema, {formats::Hdf5WriteOptions::Layout::chunked, 16, 4});
  // Garbage in the middle of chunk 3 of 'image' (samples 48..63): inflating it fails.
  auto [addr, size] = image_chunk(p, 48);
  ASSERT_NE(addr, HADDR_UNDEF);
  {
    std::fstream out(p, std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(static_cast<std::streamoff>(addr));
    const std::string garbage(static_cast<std::size_t>(size), '\xff');
    out.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  std::vector<std::byte> buf(16 * schema.fields[0].bytes_per_sample());
  std::vector<std::byte*> dest{buf.data()};
  const std::vector<std::uint64_t> good{0, 1, 2};
  const std::vector<std::uint64_t> bad{50, 51};
  {
    // Through HDF5 (and zlib): HDF5's reason.
    formats::Hdf5Reader r(p, {"image"}, formats::Hdf5Path::hdf5_only);
    r.read(good, dest);  // other chunks still read
    try {
      r.read(bad, dest);
      FAIL() << "no error for a corrupt chunk";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_EQ(e.code(), ErrorCode::dataset) << m;
      EXPECT_THAT(m, HasSubstr(p + ": dataset 'image': reading samples 50..51: "));
      EXPECT_THAT(m, Not(HasSubstr("H5Dread failed")));  // HDF5's reason, not the C++ API's summary
      EXPECT_THAT(m, HasSubstr("inflate() failed"));
    }
    // Through libdeflate: the chunk, and what is wrong with it.
    formats::Hdf5Reader fast(p, {"image"}, formats::Hdf5Path::automatic);
    ASSERT_TRUE(fast.inflates(0));
    fast.read(good, dest);
    expect_error(
        ErrorCode::dataset, [&] { fast.read(bad, dest); },
        {p + ": dataset 'image': chunk 3 does not inflate to 960 bytes (bad deflate data): the file is damaged"});
  }  // closed: HDF5 shares one open file among its handles, and the next part changes the file
  // A file cut short in the middle of image's last chunk (samples 384..399): reading there fails,
  // naming the file.
  std::tie(addr, size) = image_chunk(p, 384);
  ASSERT_NE(addr, HADDR_UNDEF);
  std::filesystem::resize_file(p, addr + size / 2);
  expect_error(ErrorCode::dataset,
               [&] {
                 formats::Hdf5Reader cut(p, {"image"}, formats::Hdf5Path::hdf5_only);
                 const std::vector<std::uint64_t> last{399};
                 cut.read(last, dest);
               },
               {p});
}

// The quasi-random order read through one reader inflates every chunk once; a random order
// inflates a chunk for nearly every sample.
TEST(Hdf5Reader, QuasiRandomOrderInflatesEachChunkOnce) {
  TempDir tmp;
  Schema schema = small_schema(4096);
  write_hdf5(tmp.path("gz.h5"), schema, {formats::Hdf5WriteOptions::Layout::chunked, 64, 4});
  auto inflations = [&](const std::vector<std::uint64_t>& order) {
    formats::Hdf5Reader r(tmp.path("gz.h5"), {}, formats::Hdf5Path::automatic);
    const std::uint64_t at_open = r.chunks_inflated();  // the check against H5Dread at open
    std::vector<std::vector<std::byte>> bufs;
    std::vector<std::byte*> dest;
    for (const auto& f : schema.fields) {
      bufs.emplace_back(32 * f.bytes_per_sample());
      dest.push_back(bufs.back().data());
    }
    for (std::size_t k = 0; k < order.size(); k += 32) {
      r.read(std::span<const std::uint64_t>(order).subspan(k, 32), dest);
    }
    return (r.chunks_inflated() - at_open) / schema.fields.size();
  };
  const std::uint64_t chunks = 4096 / 64;
  EXPECT_EQ(inflations(detail::quasi_random_order(4096, 64, detail::kQuasiRandomWindowGroups, 1, 0)), chunks);
  EXPECT_GT(inflations(detail::permutation(4096, 1, 0)), 20 * chunks);
}

long rss_anon_kb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}

TEST(Hdf5Reader, CompressedChunkCacheStaysBoundedUnderRandomReads) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "resident memory says nothing under AddressSanitizer, which quarantines freed memory";
#endif
  TempDir tmp;
  Schema schema;
  schema.num_samples = 20000;
  schema.fields = {{"image", FieldKind::fixed, DType::u8, {3, 32, 32}}};  // 60 MB raw, 192 KiB chunks
  write_hdf5(tmp.path("gz.h5"), schema, {formats::Hdf5WriteOptions::Layout::chunked, 64, 1});
  formats::Hdf5Reader r(tmp.path("gz.h5"), {}, formats::Hdf5Path::automatic);
  std::vector<std::byte> out(3072);
  std::byte* dest[1] = {out.data()};
  const long before = rss_anon_kb();
  std::uint64_t state = 99;
  for (int k = 0; k < 600; ++k) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    std::uint64_t i = (state >> 33) % schema.num_samples;
    r.read({&i, 1}, dest);
    auto want = expected_field(schema.fields[0], i);
    ASSERT_EQ(0, std::memcmp(out.data(), want.data(), want.size())) << i;
  }
  // Unbounded, the cache would hold most of the 60 MB inflated; bounded it holds 8 chunks.
  EXPECT_LT(rss_anon_kb() - before, 16 * 1024);
}

// The file HDF5 opens is not inherited by a program the trainer execs.
TEST(Hdf5Reader, TheFileDescriptorIsCloseOnExec) {
  TempDir tmp;
  write_hdf5(tmp.path("d.h5"), small_schema(3), {});
  formats::Hdf5Reader r(tmp.path("d.h5"), {}, formats::Hdf5Path::automatic);
  int seen = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (ec || target != std::filesystem::path(tmp.path("d.h5"))) continue;
    const int fd = std::stoi(e.path().filename().string());
    EXPECT_NE(::fcntl(fd, F_GETFD) & FD_CLOEXEC, 0) << "fd " << fd;
    ++seen;
  }
  EXPECT_GE(seen, 1);
}

}  // namespace
}  // namespace stoker::test
