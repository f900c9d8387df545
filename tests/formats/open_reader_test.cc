// formats: which format a path holds.
#include "formats/open_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "stoker/error.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

TEST(DetectFormat, TellsHdf5FromLmdbAndRefusesOthers) {
  TempDir tmp;
  write_hdf5(tmp.path("a.h5"), small_schema(5), {});
  write_lmdb(tmp.path("a.lmdb"), small_schema(5));
  EXPECT_EQ(formats::detect_format(tmp.path("a.h5")), Format::hdf5);
  EXPECT_EQ(formats::detect_format(tmp.path("a.lmdb")), Format::lmdb);
  { std::ofstream(tmp.path("x.bin")) << "hello"; }
  expect_error(ErrorCode::dataset, [&] { formats::detect_format(tmp.path("x.bin")); },
               {"x.bin", "neither an HDF5 file nor an LMDB"});
  expect_error(ErrorCode::dataset, [&] { formats::detect_format(tmp.path("nope")); }, {"nope", "No such file"});
}

}  // namespace
}  // namespace stoker::test
