// Datasets whose bytes HDF5 would read wrongly, or not at all (formats/hdf5/storage_check.h): a
// filter this HDF5 lacks, data stored outside the file, a virtual dataset whose source is missing.
// Each is an error naming the field and the file when the reader (or the Loader) is built, never
// a field of fill values, another file's bytes, or a failure at batch 0.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "formats/hdf5/hdf5_reader.h"
#include "formats/hdf5/hdf5_schema.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

// An HDF5 file written through the C API, closed on destruction.
struct File {
  hid_t id;
  explicit File(const std::string& path) : id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {}
  ~File() { H5Fclose(id); }
  // A dataset of `type` and `dims` with creation properties `dcpl`, written with `data` if given.
  void dataset(const char* name, hid_t type, std::vector<hsize_t> dims, const void* data = nullptr,
               hid_t dcpl = H5P_DEFAULT) {
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t d = H5Dcreate2(id, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    EXPECT_GE(d, 0) << name;
    if (data) {
      EXPECT_GE(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), 0) << name;
    }
    H5Dclose(d);
    H5Sclose(space);
  }
};

std::vector<std::int32_t> iota_i32(std::size_t n, std::int32_t first) {
  std::vector<std::int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Reads every sample of the single i32 field of `r`.
std::vector<std::int32_t> read_i32(formats::Reader& r) {
  std::vector<std::uint64_t> all(r.schema().num_samples);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::int32_t> out(all.size());
  std::vector<std::byte*> dest{reinterpret_cast<std::byte*>(out.data())};
  r.read(all, dest);
  return out;
}

// HDF5's LZF filter (id 32000), as h5py registers it, with a body that leaves the bytes as they
// are: the test process writes a file with it, then unregisters it, so that the file needs a
// filter this HDF5 lacks.
constexpr H5Z_filter_t kLzf = 32000;
std::size_t keep_bytes(unsigned, std::size_t, const unsigned[], std::size_t nbytes, std::size_t*, void**) {
  return nbytes;
}

// While alive: no HDF5 plugin is loaded, in this process or in one it starts (the probe, exec'd
// or forked), so that a filter plugin installed on the machine cannot make the file readable.
class NoHdf5Plugins {
 public:
  explicit NoHdf5Plugins(const TempDir& tmp) {
    const char* was = std::getenv("HDF5_PLUGIN_PATH");
    if (was) was_ = was;
    std::filesystem::create_directories(tmp.path("no-plugins"));
    ::setenv("HDF5_PLUGIN_PATH", tmp.path("no-plugins").c_str(), 1);
    H5PLget_loading_state(&state_);
    H5PLset_loading_state(0);
  }
  ~NoHdf5Plugins() {
    H5PLset_loading_state(state_);
    if (was_) {
      ::setenv("HDF5_PLUGIN_PATH", was_->c_str(), 1);
    } else {
      ::unsetenv("HDF5_PLUGIN_PATH");
    }
  }
  NoHdf5Plugins(const NoHdf5Plugins&) = delete;
  NoHdf5Plugins& operator=(const NoHdf5Plugins&) = delete;

 private:
  std::optional<std::string> was_;
  unsigned state_ = 0;
};

// `x`: i32[20], chunks of 5 samples compressed with LZF (a filter this process lacks after).
void write_lzf_file(const std::string& path) {
  const H5Z_class2_t lzf{H5Z_CLASS_T_VERS, kLzf, 1, 1, "lzf", nullptr, nullptr, keep_bytes};
  ASSERT_GE(H5Zregister(&lzf), 0);
  {
    File f(path);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    const hsize_t chunk[1] = {5};
    H5Pset_chunk(dcpl, 1, chunk);
    ASSERT_GE(H5Pset_filter(dcpl, kLzf, H5Z_FLAG_MANDATORY, 0, nullptr), 0);
    const std::vector<std::int32_t> values = iota_i32(20, 0);
    f.dataset("x", H5T_STD_I32LE, {20}, values.data(), dcpl);
    H5Pclose(dcpl);
  }
  ASSERT_GE(H5Zunregister(kLzf), 0);
  ASSERT_LE(H5Zfilter_avail(kLzf), 0);
}

TEST(Hdf5Storage, AFilterThisHdf5LacksIsAnErrorNamingFieldAndFilterWhenTheLoaderIsBuilt) {
  TempDir tmp;
  NoHdf5Plugins no_plugins(tmp);
  const std::string p = tmp.path("lzf.h5");
  write_lzf_file(p);
  const std::string want = p +
                           ": dataset 'x': compressed with filter 32000 (lzf), which is not available in this HDF5: "
                           "re-save the file with gzip (h5repack -f GZIP=4 IN OUT) or install the filter's HDF5 "
                           "plugin and set HDF5_PLUGIN_PATH to its directory";
  for (std::size_t workers : {0u, 1u}) {
    Options o;
    o.source = p;
    o.batch_size = 4;
    o.num_workers = workers;
    const Caught e = caught([&] { Loader loader(o); });
    EXPECT_EQ(e.code, ErrorCode::dataset) << workers << " workers: " << e.message;
    EXPECT_THAT(e.message, HasSubstr(want)) << workers << " workers";
  }
  expect_error(ErrorCode::dataset, [&] { formats::hdf5_schema(p); }, {want});
}

TEST(Hdf5Storage, DataStoredOutsideTheFileIsRefusedNamingFieldAndFile) {
  TempDir tmp;
  // A file that is no HDF5 dataset's (here the test's own; a crafted file could name /etc/shadow).
  const std::string secret = tmp.path("secret.txt");
  { std::ofstream(secret) << "0123456789abcdefghijklmnopqrstuvwxyzABCD"; }
  const std::string p = tmp.path("external.h5");
  {
    File f(p);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_external(dcpl, secret.c_str(), 0, 40), 0);
    f.dataset("x", H5T_STD_U8LE, {4, 10}, nullptr, dcpl);
    H5Pclose(dcpl);
    const std::vector<std::int32_t> labels = iota_i32(4, 0);
    f.dataset("label", H5T_STD_I32LE, {4}, labels.data());
  }
  const std::vector<std::string> want{
      p + ": dataset 'x': its data is stored outside the HDF5 file, in '" + secret +
      "' (external storage): stoker does not read external storage, which may name any file on this machine; "
      "copy the data into the file (h5repack -l CONTI IN OUT"};
  expect_error(
      ErrorCode::dataset, [&] { formats::hdf5_schema(p); }, want);
  expect_error(
      ErrorCode::dataset, [&] { formats::Hdf5Reader r(p, {"x"}, formats::Hdf5Path::automatic); }, want);
  expect_error(
      ErrorCode::dataset, [&] { formats::Hdf5Reader r(p, {"x"}, formats::Hdf5Path::hdf5_only); }, want);
  Options o;
  o.source = p;
  o.batch_size = 2;
  o.num_workers = 1;
  expect_error(
      ErrorCode::dataset, [&] { Loader loader(o); }, want);
  // The other field is read.
  formats::Hdf5Reader labels(p, {"label"}, formats::Hdf5Path::automatic);
  EXPECT_EQ(read_i32(labels), iota_i32(4, 0));
}

// A sample group's members are checked as they are read: one stored outside the file is an error
// naming its sample, not that file's bytes.
TEST(Hdf5Storage, ASampleGroupMemberStoredOutsideTheFileIsAnErrorNamingItsSample) {
  TempDir tmp;
  const std::string secret = tmp.path("secret.txt");
  { std::ofstream(secret) << "0123456789"; }
  const std::string p = tmp.path("members.h5");
  {
    File f(p);
    H5Gclose(H5Gcreate2(f.id, "jpeg", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    const std::vector<std::uint8_t> bytes{1, 2, 3};
    for (const char* m : {"jpeg/0", "jpeg/1", "jpeg/3"}) f.dataset(m, H5T_STD_U8LE, {3}, bytes.data());
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_external(dcpl, secret.c_str(), 0, 10), 0);
    f.dataset("jpeg/2", H5T_STD_U8LE, {10}, nullptr, dcpl);
    H5Pclose(dcpl);
  }
  formats::Hdf5Reader r(p, {}, formats::Hdf5Path::automatic);
  formats::VarBytes out;
  const std::vector<std::uint64_t> first{0, 1};
  std::vector<formats::FieldOut> into{formats::FieldOut{nullptr, &out}};
  r.read(first, into);
  EXPECT_EQ(out.samples(), 2u);
  const std::vector<std::uint64_t> bad{2};
  expect_error(
      ErrorCode::dataset, [&] { r.read(bad, into); },
      {p + ": group 'jpeg': sample 2 (member '2'): its data is stored outside the HDF5 file, in '" + secret + "'"});
}

// `v`: a virtual i32[10] (fill value -1) of `source`:/d (i32[10]).
void write_virtual(const std::string& path, const std::string& source) {
  File f(path);
  const hsize_t n[1] = {10};
  const hid_t space = H5Screate_simple(1, n, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  const std::int32_t fill = -1;
  H5Pset_fill_value(dcpl, H5T_NATIVE_INT32, &fill);
  ASSERT_GE(H5Pset_virtual(dcpl, space, source.c_str(), "/d", space), 0);
  const hid_t d = H5Dcreate2(f.id, "v", H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
}

// A virtual dataset is read through HDF5 when its sources are found where HDF5 looks for them; one
// whose source file or dataset is missing, or whose source does not fit the mapping, is an error
// naming the field and the source, never a field of fill values.
TEST(Hdf5Storage, AVirtualDatasetIsReadFromItsSourcesAndOneWithASourceMissingIsRefused) {
  TempDir tmp;
  const std::string p = tmp.path("virtual.h5");
  write_virtual(p, "src.h5");  // a name relative to the virtual dataset's directory
  {
    File src(tmp.path("src.h5"));
    const std::vector<std::int32_t> values = iota_i32(10, 100);
    src.dataset("d", H5T_STD_I32LE, {10}, values.data());
  }
  {
    formats::Hdf5Reader r(p, {}, formats::Hdf5Path::automatic);
    EXPECT_EQ(read_i32(r), iota_i32(10, 100));
  }
  std::filesystem::remove(tmp.path("src.h5"));
  const std::string field = p + ": dataset 'v': a virtual dataset whose ";
  expect_error(ErrorCode::dataset, [&] { formats::hdf5_schema(p); },
               {field + "source file 'src.h5' (mapping 1 of 1) is not found (looked for as " + tmp.path("src.h5"),
                "HDF5 reads a missing source as the fill value: put the file where the virtual dataset names it",
                "or re-save the dataset with its data (h5repack -l CONTI IN OUT)"});
  Options o;
  o.source = p;
  o.batch_size = 5;
  o.num_workers = 1;
  expect_error(ErrorCode::dataset, [&] { Loader loader(o); }, {field + "source file 'src.h5'"});
  {
    File src(tmp.path("src.h5"));  // the file, without the dataset
    const std::vector<std::int32_t> values = iota_i32(10, 100);
    src.dataset("other", H5T_STD_I32LE, {10}, values.data());
  }
  expect_error(ErrorCode::dataset, [&] { formats::Hdf5Reader r(p, {"v"}, formats::Hdf5Path::automatic); },
               {field + "source dataset '/d' is not in '" + tmp.path("src.h5") + "' (mapping 1 of 1)"});
  {
    File src(tmp.path("src.h5"));  // the dataset, shorter than the mapping
    const std::vector<std::int32_t> values = iota_i32(6, 100);
    src.dataset("d", H5T_STD_I32LE, {6}, values.data());
  }
  expect_error(ErrorCode::dataset, [&] { formats::hdf5_schema(p); },
               {field + "mapping 1 of 1 does not fit its source '/d' in '" + tmp.path("src.h5") + "' (of shape (6))"});
}

// A virtual dataset's sources are checked as the dataset is: a source stored outside its file is
// refused through the virtual dataset too.
TEST(Hdf5Storage, AVirtualDatasetWhoseSourceIsStoredOutsideItsFileIsRefused) {
  TempDir tmp;
  const std::string secret = tmp.path("secret.txt");
  { std::ofstream(secret) << std::string(40, 'x'); }
  const std::string p = tmp.path("virtual.h5");
  write_virtual(p, tmp.path("src.h5"));
  {
    File src(tmp.path("src.h5"));
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ASSERT_GE(H5Pset_external(dcpl, secret.c_str(), 0, 40), 0);
    src.dataset("d", H5T_STD_I32LE, {10}, nullptr, dcpl);
    H5Pclose(dcpl);
  }
  expect_error(
      ErrorCode::dataset, [&] { formats::hdf5_schema(p); },
      {p + ": dataset 'v': a virtual dataset whose source '/d' in '" + tmp.path("src.h5") +
       "' (mapping 1 of 1) cannot be read as stored: its data is stored outside the HDF5 file, in '" + secret + "'"});
}

}  // namespace
}  // namespace stoker::test
