// Names a Loader is given or finds: a text option holding a NUL character, a field name holding
// one, a field named as the offsets of a bytes field beside it. Each is refused at construction
// with an error naming it, never cut short (another file read) or merged with another field.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <lmdb.h>

#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "formats/lmdb/lmdb_env.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using namespace std::string_literals;
using ::testing::HasSubstr;

// A file of a bytes field `jpeg` and a fixed field `other` (i64), 10 samples.
void write_bytes_and_fixed(const std::string& path, const std::string& other) {
  H5Builder f(path);
  std::vector<std::vector<std::byte>> samples;
  for (int i = 0; i < 10; ++i) samples.emplace_back(static_cast<std::size_t>(i + 1), std::byte(i));
  f.vlen("jpeg", samples);
  std::vector<std::int64_t> values(10);
  std::iota(values.begin(), values.end(), 0);
  f.array(other, H5T_NATIVE_INT64, {10}, values.data());
}

Options options_for(const std::string& source, std::size_t workers) {
  Options o;
  o.source = source;
  o.batch_size = 4;
  o.num_workers = workers;
  return o;
}

// A path is bytes: one that is not UTF-8 (a file named in Latin-1) reaches the probe and the workers
// unchanged, and is read like any other.
TEST(LoaderNames, APathThatIsNotUtf8IsReadAsAnyOther) {
  TempDir tmp;
  const std::string path = tmp.path("caf\xe9 \xff.h5");
  write_bytes_and_fixed(path, "label");
  for (const std::size_t workers : {0u, 1u}) {
    Options o = options_for(path, workers);
    o.fields = {"jpeg", "label"};
    Loader loader(o);
    Epoch epoch = loader.epoch(0);
    std::int64_t next = 0;
    while (std::optional<Batch> b = epoch.next()) {
      std::vector<std::int64_t> labels(b->size());
      b->copy_field_to_host(1, labels.data());
      for (const std::int64_t label : labels) EXPECT_EQ(label, next++) << "workers " << workers;
    }
    EXPECT_EQ(next, 10) << "workers " << workers;
  }
}

TEST(LoaderNames, ATextOptionHoldingANulIsRefusedNamingItNotCutShort) {
  TempDir tmp;
  write_lmdb(tmp.path("d.lmdb"), small_schema(10));
  const std::string source = tmp.path("d.lmdb");
  // Cut at the NUL, each of these would name something that exists: the loader would read it.
  Options o = options_for(source + "\0.bak"s, 0);
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); },
               {"options: Options::source holds a NUL character at byte " + std::to_string(source.size()) + " ('" +
                source + "\\0.bak')"});
  o = options_for("", 0);
  o.sources = {source, source + "\0x"s};
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); },
               {"options: Options::sources[1] holds a NUL character", source + "\\0x'"});
  o = options_for(source, 0);
  o.fields = {"label", "image\0mask"s};
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); },
               {"options: Options::fields[1] holds a NUL character at byte 5 ('image\\0mask')"});
  o.fields.clear();
  o.group = "\0train"s;
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); }, {"Options::group holds a NUL character at byte 0"});
  o.group.clear();
  o.pipeline = "image=flip\0,flip"s;
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); }, {"Options::pipeline holds a NUL character"});
}

TEST(LoaderNames, AFieldNamedAsTheOffsetsOfABytesFieldBesideItIsRefusedUnlessOneIsLeftOut) {
  TempDir tmp;
  const std::string path = tmp.path("d.h5");
  write_bytes_and_fixed(path, "jpeg.offsets");
  for (const std::size_t workers : {0u, 2u}) {
    expect_error(ErrorCode::dataset, [&] { Loader l(options_for(path, workers)); },
                 {path + ": field 'jpeg.offsets' has the name under which the offsets of bytes field 'jpeg' are "
                         "delivered",
                  "select one of the two with Options::fields"});
    for (const std::string kept : {"jpeg", "jpeg.offsets"}) {
      Options o = options_for(path, workers);
      o.fields = {kept};
      Loader loader(o);
      std::uint64_t samples = 0;
      for (Batch& b : loader.epoch(0)) samples += b.size();
      EXPECT_EQ(samples, 10u) << kept;
    }
  }
  // A name that only begins as the offsets' does is another name.
  write_bytes_and_fixed(tmp.path("ok.h5"), "jpeg.offsets.count");
  Loader fine(options_for(tmp.path("ok.h5"), 0));
  EXPECT_EQ(fine.schema().fields.size(), 2u);
}

// With on_decode_error = skip a batch's skipped positions are delivered (in Python) under the key
// "skipped": a field of that name is refused then, and read as any other otherwise.
TEST(LoaderNames, AFieldNamedAsTheSkippedSamplesIsRefusedWhenTheyAreDelivered) {
  TempDir tmp;
  const std::string path = tmp.path("d.h5");
  write_bytes_and_fixed(path, "skipped");
  for (const std::size_t workers : {0u, 2u}) {
    Options o = options_for(path, workers);
    o.on_decode_error = OnDecodeError::skip;
    expect_error(ErrorCode::dataset, [&] { Loader l(o); },
                 {path + ": field 'skipped' has the name under which a batch's skipped samples are delivered with "
                         "Options::on_decode_error = OnDecodeError::skip (a batch's 'skipped' in Python): leave it "
                         "out with Options::fields, or rename it in the dataset"});
    o.fields = {"jpeg"};
    EXPECT_EQ(Loader(o).schema().fields.size(), 1u);
    Loader fine(options_for(path, workers));
    EXPECT_NE(fine.schema().find("skipped"), nullptr);
  }
}

// The schema of a stoker-layout LMDB database with its field names replaced: JSON may hold any
// character, NUL included.
void rename_fields(const std::string& path, const std::string& from, const std::string& to) {
  formats::LmdbEnv env;
  formats::check_mdb(mdb_env_set_maxdbs(env.get(), 4), path);
  formats::check_mdb(mdb_env_open(env.get(), path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK, 0644), path);
  formats::LmdbTxn txn(env.get(), 0, path);
  MDB_dbi dbi;
  formats::check_mdb(mdb_dbi_open(txn.get(), formats::kMetaDb, 0, &dbi), path);
  MDB_val k{formats::kSchemaKey.size(), const_cast<char*>(formats::kSchemaKey.data())}, v;
  formats::check_mdb(mdb_get(txn.get(), dbi, &k, &v), path);
  std::string json(static_cast<const char*>(v.mv_data), v.mv_size);
  for (std::size_t at = json.find(from); at != std::string::npos; at = json.find(from, at + to.size())) {
    json.replace(at, from.size(), to);
  }
  MDB_val nv{json.size(), json.data()};
  formats::check_mdb(mdb_put(txn.get(), dbi, &k, &nv, 0), path);
  txn.commit(path);
}

TEST(LoaderNames, AFieldNameHoldingANulIsRefusedNotMergedWithAnother) {
  TempDir tmp;
  const std::string path = tmp.path("d.lmdb");
  write_lmdb(path, small_schema(10));  // fields image, label
  // "image" and "label" become "x\u0000image" and "x\u0000label": one name, "x", for a C string.
  rename_fields(path, "\"image\"", "\"x\\u0000image\"");
  rename_fields(path, "\"label\"", "\"x\\u0000label\"");
  for (const std::size_t workers : {0u, 2u}) {
    expect_error(ErrorCode::dataset, [&] { Loader l(options_for(path, workers)); },
                 {path, "has a name that holds a NUL character ('x\\0"});
  }
  Schema s;
  s.num_samples = 1;
  s.fields = {Field{"a\0b"s, FieldKind::fixed, DType::u8, {}}};
  expect_error(ErrorCode::dataset, [&] { s.validate("ctx"); },
               {"ctx: field 0 has a name that holds a NUL character ('a\\0b'), which no field name may"});
}

}  // namespace
}  // namespace stoker::test
