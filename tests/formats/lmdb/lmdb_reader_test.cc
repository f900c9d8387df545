#include "formats/lmdb/lmdb_reader.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <lmdb.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <tuple>

#include "formats/hdf5/hdf5_reader.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_writer.h"
#include "formats/open_reader.h"
#include "loader/plan/quasi_random.h"
#include "loader/plan/shuffle.h"
#include "stoker/error.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

namespace fs = std::filesystem;
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

TEST(LmdbReader, RoundTripsEveryDtypeAndSelectsFields) {
  TempDir tmp;
  Schema schema = all_dtypes_schema(300);
  write_lmdb(tmp.path("d.lmdb"), schema);
  formats::LmdbReader all(tmp.path("d.lmdb"), {});
  EXPECT_EQ(all.schema(), schema);
  expect_reads(all, kMixedIndices);
  expect_reads(all, {299, 0, 150});
  formats::LmdbReader some(tmp.path("d.lmdb"), {"i_f64", "b_i8"});
  ASSERT_EQ(some.schema().fields.size(), 2u);
  EXPECT_EQ(some.schema().fields[0].name, "i_f64");
  expect_reads(some, kMixedIndices);
  auto stored = formats::lmdb_stored_schema(tmp.path("d.lmdb"));
  EXPECT_TRUE(stored.complete);
  EXPECT_TRUE(stored.content_digest.has_value());
}

TEST(LmdbReader, ReadsTheDirectoryForm) {
  TempDir tmp;
  Schema schema = small_schema(50);
  write_lmdb(tmp.path("data.mdb"), schema);  // a directory holding data.mdb is LMDB's default form
  formats::LmdbReader r(tmp.dir().string(), {});
  expect_reads(r, {0, 49, 3});
  EXPECT_EQ(formats::detect_format(tmp.dir().string()), Format::lmdb);
}

// Opens `path` for writing with the raw LMDB API.
struct RawEnv {
  formats::LmdbEnv env;
  explicit RawEnv(const std::string& path) {
    mdb_env_set_maxdbs(env.get(), 4);
    mdb_env_set_mapsize(env.get(), 64 << 20);
    EXPECT_EQ(0, mdb_env_open(env.get(), path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK, 0644));
  }
  void put(const char* db, const void* key, std::size_t klen, const void* val, std::size_t vlen) {
    formats::LmdbTxn txn(env.get(), 0, "test");
    MDB_dbi dbi;
    ASSERT_EQ(0, mdb_dbi_open(txn.get(), db, MDB_CREATE, &dbi));
    MDB_val k{klen, const_cast<void*>(key)}, v{vlen, const_cast<void*>(val)};
    ASSERT_EQ(0, mdb_put(txn.get(), dbi, &k, &v, 0));
    txn.commit("test");
  }
  void del(const char* db, const void* key, std::size_t klen) {
    formats::LmdbTxn txn(env.get(), 0, "test");
    MDB_dbi dbi;
    ASSERT_EQ(0, mdb_dbi_open(txn.get(), db, 0, &dbi));
    MDB_val k{klen, const_cast<void*>(key)};
    ASSERT_EQ(0, mdb_del(txn.get(), dbi, &k, nullptr));
    txn.commit("test");
  }
};

// In a child process, as another program would: commits one write to the schema's sub-database of
// the database at `path`, in place.
int write_in_place_from_another_process(const std::string& path) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(30);
    MDB_env* env = nullptr;
    if (mdb_env_create(&env) != 0 || mdb_env_set_maxdbs(env, 4) != 0) ::_exit(2);
    if (mdb_env_open(env, path.c_str(), MDB_NOSUBDIR | MDB_NOLOCK, 0644) != 0) ::_exit(3);
    MDB_txn* txn = nullptr;
    MDB_dbi dbi;
    MDB_val k{4, const_cast<char*>("note")}, v{5, const_cast<char*>("hello")};
    if (mdb_txn_begin(env, nullptr, 0, &txn) != 0 || mdb_dbi_open(txn, formats::kMetaDb, 0, &dbi) != 0 ||
        mdb_put(txn, dbi, &k, &v, 0) != 0 || mdb_txn_commit(txn) != 0)
      ::_exit(4);
    mdb_env_close(env);
    ::_exit(0);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

// A database written while a reader reads it is an error at the next read, never a batch of two
// versions (or of pages the writer reused).
TEST(LmdbReader, RefusesADatabaseWrittenWhileItReads) {
  TempDir tmp;
  const Schema schema = small_schema(40);
  const std::string path = tmp.path("d.lmdb");
  write_lmdb(path, schema);
  formats::LmdbReader r(path, {});
  expect_reads(r, {0, 39, 7});
  const std::uint64_t version = r.version();
  EXPECT_GT(version, 0u);
  ASSERT_EQ(write_in_place_from_another_process(path), 0);
  for (int attempt = 0; attempt < 2; ++attempt) {  // and stays an error
    try {
      expect_reads(r, {1});
      ADD_FAILURE() << "a read after the write must throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::dataset);
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("d.lmdb: the database was written while it was read (its last "
                                                  "transaction was {} when it was opened, {} now)",
                                                  version, version + 1)));
    }
  }
  EXPECT_FALSE(fs::exists(path + "-lock")) << "no lock file is left beside the dataset";
  formats::LmdbReader again(path, {});
  EXPECT_EQ(again.version(), version + 1);
  expect_reads(again, {1, 2});
}

// A database on read-only media is read (no lock file is needed).
TEST(LmdbReader, ReadsADatabaseOnReadOnlyMedia) {
  TempDir tmp;
  const Schema schema = small_schema(30);
  fs::create_directories(tmp.path("src"));
  fs::create_directories(tmp.path("ro"));
  write_lmdb(tmp.path("src/d.lmdb"), schema);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(30);
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(77);
    if (::mount(tmp.path("src").c_str(), tmp.path("ro").c_str(), nullptr, MS_BIND, nullptr) != 0 ||
        ::mount(nullptr, tmp.path("ro").c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0)
      ::_exit(77);
    try {
      formats::LmdbReader r(tmp.path("ro/d.lmdb"), {});
      std::vector<std::uint64_t> all(30);
      std::iota(all.begin(), all.end(), 0);
      expect_reads(r, all);
      if (::testing::Test::HasFailure()) ::_exit(4);
      ::_exit(fs::exists(tmp.path("ro/d.lmdb-lock")) ? 3 : 0);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      ::_exit(2);
    }
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 77) GTEST_SKIP() << "mount namespaces are not permitted here";
  EXPECT_EQ(WEXITSTATUS(st), 0);
  EXPECT_FALSE(fs::exists(tmp.path("src/d.lmdb-lock")));
}

// A database whose meta pages claim more entries than its file can hold (a damaged or crafted
// count) is refused before anything is sized from the count.
TEST(LmdbReader, ACountOfEntriesTheFileCannotHoldIsRefusedBeforeAnyAllocation) {
  TempDir tmp;
  const std::string path = tmp.path("plain.lmdb");
  std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>> records;
  for (int i = 0; i < 10; ++i) {
    const std::string k = std::to_string(i);
    records.emplace_back(std::vector<std::byte>(reinterpret_cast<const std::byte*>(k.data()),
                                                reinterpret_cast<const std::byte*>(k.data()) + k.size()),
                         std::vector<std::byte>(4, std::byte{7}));
  }
  write_plain_lmdb(path, records);
  // Both meta pages (the first two pages): the main database's md_entries, after the page header
  // (16), magic, version, address, map size (24) and the free list's MDB_db (48), at +32 in its MDB_db.
  const std::uint64_t claim = std::uint64_t{1} << 40;
  const auto page = static_cast<std::streamoff>(::sysconf(_SC_PAGESIZE));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    for (const std::streamoff meta : {std::streamoff{0}, page}) {
      f.seekp(meta + 16 + 24 + 48 + 32);
      f.write(reinterpret_cast<const char*>(&claim), sizeof claim);
    }
  }
  try {
    formats::LmdbReader r(path, {});
    FAIL() << "a count the file cannot hold must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::dataset);
    EXPECT_THAT(e.what(), HasSubstr("plain.lmdb: claims 1099511627776 entries, more than a database of"));
  }
}

TEST(LmdbReader, BadInputsGiveClearErrors) {
  TempDir tmp;
  const std::string p = tmp.path("bad.lmdb");
  auto open = [&](std::vector<std::string> fields = {}) { formats::LmdbReader r(p, fields); };
  expect_error(ErrorCode::dataset, open, {p, "No such file"});
  { std::ofstream(p) << std::string(8192, 'x'); }
  expect_error(ErrorCode::dataset, open, {p, "not an LMDB database"});
  std::filesystem::remove(p);
  {
    RawEnv raw(p);
    raw.put(nullptr, "k", 1, "v", 1);
  }
  expect_error(ErrorCode::dataset, open, {p, "without a stoker schema"});
  std::filesystem::remove(p);

  Schema schema = small_schema(20);
  write_lmdb(p, schema);
  expect_error(ErrorCode::invalid_option, [&] { open({"pixels"}); },
               {p, "unknown field 'pixels'", "image, label, weight"});
  unsigned char key[8];
  formats::encode_key(5, key);
  overwrite_lmdb_record(p, 5, "short");
  {
    formats::LmdbReader r(p, {});
    std::vector<std::byte> a(64 * 3), b(64 * 8), c(64 * 8);
    std::byte* dest[3] = {a.data(), b.data(), c.data()};
    std::vector<std::uint64_t> idx{4, 5};
    expect_error(ErrorCode::dataset, [&] { r.read(idx, dest); },
                 {p, "sample 5", "key 0000000000000005", "has 5 bytes", "schema says 76"});
  }
  {
    RawEnv raw(p);
    raw.del(formats::kSamplesDb, key, 8);
  }
  expect_error(ErrorCode::dataset, open, {p, "holds 19 records but the schema says 20"});
}

TEST(LmdbReader, RefusesAnIncompleteDatabase) {
  TempDir tmp;
  const std::string p = tmp.path("partial.lmdb");
  {
    formats::LmdbWriter w(p, small_schema(10), {});
    auto rec = expected_sample(small_schema(10), 0);
    w.append(rec.data());
    w.commit();
  }  // never finished
  expect_error(ErrorCode::dataset, [&] { formats::LmdbReader r(p, {}); }, {p, "incomplete", "--resume"});
}

TEST(LmdbWriter, GrowsASmallMapInsteadOfFailing) {
  TempDir tmp;
  Schema schema = small_schema(2000);
  formats::LmdbWriteOptions o;
  o.map_size = 64 << 10;  // far too small
  o.commit_records = 500;
  const std::string p = tmp.path("grow.lmdb");
  {
    formats::LmdbWriter w(p, schema, o);
    for (std::uint64_t i = 0; i < schema.num_samples; ++i) w.append(expected_sample(schema, i).data());
    w.finish("0000000000000000");
    EXPECT_GT(w.map_size(), 64u << 10);
  }
  formats::LmdbReader r(p, {});
  expect_reads(r, {0, 1999, 1000});
}

}  // namespace
}  // namespace stoker::test
