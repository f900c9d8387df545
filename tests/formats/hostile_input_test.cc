// Sizes that come from a file or a schema are checked against kMaxSampleBytes, with overflow
// checks, before anything is allocated: a hostile or damaged file is an error, not an allocation of
// its say-so.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <functional>

#include "formats/core/schema_json.h"
#include "formats/hdf5/hdf5_reader.h"
#include "stoker/error.h"
#include "stoker/state.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

std::string schema_with(const std::string& fields) {
  return R"({"format": "stoker", "version": )" + std::to_string(formats::kSchemaFormatVersion) +
         R"(, "num_samples": 10, "complete": true, "fields": [)" + fields + "]}";
}

TEST(HostileInput, SchemaSizesAreBoundedWithOverflowChecks) {
  // The message of the error a schema of `fields` is refused with: a dataset error, as a damaged file is.
  auto parse = [](const std::string& fields) {
    const Caught e = caught([&] { formats::schema_from_json(schema_with(fields), "db.lmdb"); });
    EXPECT_EQ(e.code, ErrorCode::dataset) << e.message;
    return e.message;
  };
  // 2^40 x 2^40 bytes would overflow 64 bits; each step is checked against the limit first.
  EXPECT_THAT(parse(R"({"name": "x", "kind": "fixed", "dtype": "u8", "shape": [1099511627776, 1099511627776]})"),
              HasSubstr("db.lmdb: field 'x' (u8[1099511627776,1099511627776]) would be more than 1073741824 bytes"));
  EXPECT_THAT(parse(R"({"name": "x", "kind": "fixed", "dtype": "f64", "shape": [16384, 16384]})"),
              HasSubstr("field 'x' (f64[16384,16384]) would be more than 1073741824 bytes"));
  // Each field fits, together they do not.
  EXPECT_THAT(parse(R"({"name": "a", "kind": "fixed", "dtype": "u8", "shape": [1073741824]},
                      {"name": "b", "kind": "fixed", "dtype": "u8", "shape": [1]})"),
              HasSubstr("a sample of all fields would be more than 1073741824 bytes (at field 'b')"));
  EXPECT_THAT(parse(R"({"name": "x", "kind": "fixed", "dtype": "u8", "shape": [-3]})"),
              HasSubstr("field 'x' has a dimension -3 (at least 1)"));
  EXPECT_THAT(parse(R"({"name": "x", "kind": "fixed", "dtype": "u8", "shape": [2]},
                      {"name": "x", "kind": "fixed", "dtype": "i64", "shape": []})"),
              HasSubstr("two fields are named 'x'"));
  EXPECT_THAT(parse(R"({"name": "", "kind": "fixed", "dtype": "u8", "shape": [2]})"), HasSubstr("empty name"));
  EXPECT_THAT(parse(R"({"name": "x", "kind": "fixed", "dtype": "u8", "shape": [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,
                      1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]})"),
              HasSubstr("field 'x' has 33 dimensions, more than 32"));
  EXPECT_THAT(parse(""), HasSubstr("the schema has no fields"));
  // Numbers are whole and in range, never cast (found by fuzz/schema_json_fuzz.cc).
  expect_error(ErrorCode::dataset,
               [] {
                 formats::schema_from_json(R"({"format": "stoker", "version": 1e44, "num_samples": 1, "complete": true,
                                      "fields": []})",
                                           "db.lmdb");
               },
               {"db.lmdb: schema record: version is 1e+44, not a whole number"});
  EXPECT_THAT(parse(R"({"name": "x", "kind": "fixed", "dtype": "u8", "shape": [2.5]})"),
              HasSubstr("a dimension of field 'x' is 2.5, not a whole number"));
  EXPECT_THAT(parse(R"({"name": "x", "kind": "bytes", "max_bytes": -1})"), HasSubstr("max_bytes is -1, not a count"));
}

TEST(HostileInput, LoaderStateNumbersAreWholeAndInRange) {
  const std::string good = LoaderState{}.to_json();
  std::string bad = good;
  const auto at = bad.find("\"epoch\":");
  ASSERT_NE(at, std::string::npos);
  bad.insert(at + 8, "1e300,\"x\":");
  expect_error(ErrorCode::state_mismatch, [&] { LoaderState::from_json(bad); },
               {"'epoch' is 1e+300, not a whole number in range"});
}

// A state or schema nested 100 000 deep (a 200 KB file) is refused by the parser's depth limit,
// before anything recurses over it (printing it in the message overflowed the stack); a large
// value is named by its kind and size, never printed whole.
TEST(HostileInput, DeeplyNestedOrHugeJsonIsRefusedWithoutPrintingIt) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_error(ErrorCode::state_mismatch, [&] { LoaderState::from_json(R"({"stoker_state": )" + deep + "}"); },
               {"loader state: not JSON", "nested more than 8 levels deep"});
  expect_error(ErrorCode::dataset, [&] { formats::schema_from_json(schema_with(deep), "db.lmdb"); },
               {"db.lmdb: malformed schema record", "nested more than 32 levels deep"});
  // Each value in the place of "epoch": how the message shows it.
  auto message_for = [](const std::string& value) {
    std::string state = LoaderState{}.to_json();
    const auto at = state.find("\"epoch\":");
    state.insert(at + 8, value + ",\"was\":");
    const Caught c = caught([&] { LoaderState::from_json(state); });
    EXPECT_EQ(c.code, ErrorCode::state_mismatch) << c.message;
    EXPECT_LT(c.message.size(), 200u);
    return c.message;
  };
  EXPECT_THAT(message_for("[\"" + std::string(1 << 18, 'x') + "\"]"),
              HasSubstr("'epoch' is an array of 1 elements, not a whole number in range"));
  EXPECT_THAT(message_for("\"" + std::string(1 << 16, 'x') + "\""),
              HasSubstr("'epoch' is \"" + std::string(63, 'x') + "...,"));
  EXPECT_THAT(message_for(R"({"a": 1, "b": 2})"), HasSubstr("'epoch' is an object of 2 keys"));
}

TEST(HostileInput, AnHdf5DatasetLargerThanASampleMayBeIsRefusedBeforeAnyRead) {
  TempDir tmp;
  const std::string p = tmp.path("huge.h5");
  {
    // Chunked and never written: HDF5 stores nothing, whatever the dimensions say.
    hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[3] = {4, hsize_t{1} << 31, hsize_t{1} << 31}, chunk[3] = {1, 1, 1024};
    hid_t space = H5Screate_simple(3, dims, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, chunk);
    hid_t d = H5Dcreate2(f, "x", H5T_STD_U8LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    for (hid_t h : {d}) H5Dclose(h);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(f);
  }
  expect_error(ErrorCode::dataset, [&] { formats::Hdf5Reader r(p, {}, formats::Hdf5Path::automatic); },
               {p + ": dataset 'x': dimension 1 is 2147483648, more than a sample may hold"});
}

}  // namespace
}  // namespace stoker::test
