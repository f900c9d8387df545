// Links in an HDF5 file (formats/hdf5/hdf5_file.h): a soft or external link that leads nowhere is
// an error naming it, never a field left out silently; a dataset reached through an external link
// is read from its own file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <string>
#include <vector>

#include "formats/hdf5/hdf5_reader.h"
#include "formats/hdf5/hdf5_schema.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

// `a`: u8[10, 4], sample i all i; written through the C API.
void write_with_a(const std::string& path) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims[2] = {10, 4};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t d = H5Dcreate2(f, "a", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<std::uint8_t> values(40);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::uint8_t>(i / 4);
  H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  H5Dclose(d);
  H5Sclose(space);
  H5Fclose(f);
}

// Adds the link `name` with `make` (a file id) to the file at `path`.
template <class Make>
void add_link(const std::string& path, Make&& make) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_GE(make(f), 0);
  H5Fclose(f);
}

TEST(Hdf5Links, ADanglingSoftLinkIsAnErrorNamingItNotAFieldLeftOut) {
  TempDir tmp;
  const std::string p = tmp.path("soft.h5");
  write_with_a(p);
  add_link(p, [](hid_t f) { return H5Lcreate_soft("/gone", f, "ghost", H5P_DEFAULT, H5P_DEFAULT); });
  const std::string what = "a soft link to '/gone', which leads nowhere";
  // Every dataset of the group: the link is named with what it says.
  expect_error(ErrorCode::dataset, [&] { formats::hdf5_schema(p); },
               {p + ": cannot deliver every dataset of the root group: 'ghost' (" + what +
                    ": restore what it names, or remove the link); name the fields to load",
                "datasets in the root group: a; groups: none; links that lead nowhere: ghost"});
  // Selected by name.
  expect_error(ErrorCode::dataset, [&] { formats::Hdf5Reader r(p, {"ghost"}, formats::Hdf5Path::automatic); },
               {p + ": field 'ghost' is " + what + ": restore what it names, or select other fields"});
  // Through a Loader: from its constructor.
  Options o;
  o.source = p;
  o.batch_size = 2;
  o.num_workers = 1;
  expect_error(ErrorCode::dataset, [&] { Loader loader(o); }, {p + ": cannot deliver every dataset", what});
  // The other fields, selected, are read.
  EXPECT_EQ(formats::hdf5_schema(p, {"a"}).fields.size(), 1u);
}

TEST(Hdf5Links, AnExternalLinkToAMissingFileIsAnErrorNamingItNotAFieldLeftOut) {
  TempDir tmp;
  const std::string p = tmp.path("external.h5");
  write_with_a(p);
  add_link(p, [](hid_t f) { return H5Lcreate_external("missing.h5", "/data", f, "far", H5P_DEFAULT, H5P_DEFAULT); });
  const std::string what =
      "an external link to '/data' in 'missing.h5', which cannot be followed (that file is not found, not HDF5, or "
      "holds no such object";
  expect_error(
      ErrorCode::dataset, [&] { formats::hdf5_schema(p); },
      {p + ": cannot deliver every dataset of the root group: 'far' (" + what, "links that lead nowhere: far"});
  expect_error(ErrorCode::dataset, [&] { formats::hdf5_schema(p, {"a", "far"}); }, {p + ": field 'far' is " + what});
  // The file, without the dataset.
  write_with_a(tmp.path("missing.h5"));
  expect_error(ErrorCode::dataset, [&] { formats::hdf5_schema(p, {"far"}); }, {p + ": field 'far' is " + what});
}

// Two files laid out alike: `b` (u8[10, 4], contiguous) at the same offset in both, equal at
// samples 0, 5 and 9 and different elsewhere. In the first, `b` is renamed `c` and `b` made an
// external link to the second's: its offset in the second file names the first's `c` in the first.
// HDF5's reads must be the only ones: a direct pread at that offset in the first file would deliver
// `c`, and agree with HDF5 on the three samples the reader compares when it opens.
TEST(Hdf5Links, ADatasetReachedThroughAnExternalLinkIsReadFromItsOwnFile) {
  TempDir tmp;
  const std::string near = tmp.path("near.h5"), far = tmp.path("far.h5");
  const auto write_b = [](const std::string& path, std::uint8_t differ_by) {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    const hsize_t dims[2] = {10, 4};
    const hid_t space = H5Screate_simple(2, dims, nullptr);
    const hid_t d = H5Dcreate2(f, "b", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<std::uint8_t> values(40);
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::size_t sample = i / 4;
      const bool compared = sample == 0 || sample == 5 || sample == 9;
      values[i] = static_cast<std::uint8_t>(sample + (compared ? 0 : differ_by));
    }
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    H5Dclose(d);
    H5Sclose(space);
    H5Fclose(f);
  };
  write_b(near, 0);
  write_b(far, 100);
  add_link(near, [&](hid_t f) {
    if (H5Lmove(f, "b", f, "c", H5P_DEFAULT, H5P_DEFAULT) < 0) return herr_t{-1};
    return H5Lcreate_external(far.c_str(), "/b", f, "b", H5P_DEFAULT, H5P_DEFAULT);
  });
  formats::Hdf5Reader r(near, {"b"}, formats::Hdf5Path::automatic);
  EXPECT_FALSE(r.reads_directly(0));
  const std::vector<std::uint64_t> indices{0, 1, 2, 5, 8, 9};
  std::vector<std::uint8_t> got(indices.size() * 4);
  std::vector<std::byte*> dest{reinterpret_cast<std::byte*>(got.data())};
  r.read(indices, dest);
  std::vector<std::uint8_t> want;
  for (std::uint64_t i : indices) {
    const bool compared = i == 0 || i == 5 || i == 9;
    want.insert(want.end(), 4, static_cast<std::uint8_t>(i + (compared ? 0 : 100)));
  }
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace stoker::test
