#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <thread>

#include "formats/lmdb/lmdb_reader.h"
#include "stoker/digest.h"
#include "stoker/loader.h"
#include "tests/support/run_process.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kTool = STOKER_H5_TO_LMDB;

RunResult convert(std::vector<std::string> args) {
  args.insert(args.begin(), kTool);
  return run_program(args);
}

// Every sample of the LMDB equals the generator's.
void expect_lmdb_content(const std::string& path, const Schema& schema) {
  formats::LmdbReader r(path, {});
  ASSERT_EQ(r.schema(), schema);
  std::vector<std::uint64_t> idx(schema.num_samples);
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<std::vector<std::byte>> bufs;
  std::vector<std::byte*> dest;
  for (const auto& f : schema.fields) bufs.emplace_back(schema.num_samples * f.bytes_per_sample());
  for (auto& b : bufs) dest.push_back(b.data());
  r.read(idx, dest);
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    const std::size_t b = schema.fields[f].bytes_per_sample();
    for (std::uint64_t i = 0; i < schema.num_samples; ++i) {
      auto want = expected_field(schema.fields[f], i);
      ASSERT_EQ(0, std::memcmp(bufs[f].data() + i * b, want.data(), b)) << schema.fields[f].name << " " << i;
    }
  }
}

std::string loader_digest(const std::string& path) {
  Options o;
  o.source = path;
  o.batch_size = 64;
  o.num_workers = 1;
  Loader loader(o);
  ContentDigest d;
  for (Batch& b : loader.epoch(0)) d.add(b);
  return d.hex();
}

TEST(H5ToLmdb, RoundTripsEveryDtypeForEveryLayout) {
  TempDir tmp;
  Schema schema = all_dtypes_schema(777);
  using L = formats::Hdf5WriteOptions::Layout;
  for (auto [name, opts] : {std::pair{"contig", formats::Hdf5WriteOptions{L::contiguous, 0, 0}},
                            {"chunked", formats::Hdf5WriteOptions{L::chunked, 50, 0}},
                            {"gzip", formats::Hdf5WriteOptions{L::chunked, 64, 4}}}) {
    SCOPED_TRACE(name);
    const std::string in = tmp.path(std::string(name) + ".h5"), out = tmp.path(std::string(name) + ".lmdb");
    write_hdf5(in, schema, opts);
    RunResult r = convert({in, out, "--commit-every", "100", "--verify"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr("777 samples"));
    EXPECT_THAT(r.err, HasSubstr("verified"));
    EXPECT_FALSE(fs::exists(out + ".partial"));
    expect_lmdb_content(out, schema);
    auto stored = formats::lmdb_stored_schema(out);
    EXPECT_TRUE(stored.complete);
    EXPECT_EQ(stored.content_digest, loader_digest(in));
    EXPECT_EQ(loader_digest(out), loader_digest(in));
  }
}

// Sample i of a bytes field: (i * 31) % 200 + 1 bytes.
std::vector<std::byte> blob(std::uint64_t i) {
  std::vector<std::byte> b((i * 31) % 200 + 1);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((i * 3 + k) & 0xff);
  return b;
}

TEST(H5ToLmdb, BytesFieldsBecomeLayout2WithTheSameContent) {
  TempDir tmp;
  const std::string in = tmp.path("in.h5");
  const std::uint64_t n = 333;
  std::vector<std::vector<std::byte>> blobs;
  std::uint64_t largest = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    blobs.push_back(blob(i));
    largest = std::max<std::uint64_t>(largest, blobs.back().size());
  }
  {
    H5Builder f(in);
    f.group("train");
    f.vlen("train/blob", blobs);
    f.members("train/parts", blobs);
    std::vector<std::int64_t> labels(n);
    std::iota(labels.begin(), labels.end(), 0);
    f.array("train/label", H5T_NATIVE_INT64, {n}, labels.data());
  }
  const std::string out = tmp.path("out.lmdb");
  RunResult r = convert({in, out, "--group", "train", "--commit-every", "50", "--verify"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("333 samples"));
  const auto stored = formats::lmdb_stored_schema(out);
  EXPECT_EQ(stored.schema.describe_fields(), "blob: bytes, label: i64[], parts: bytes");
  EXPECT_EQ(stored.max_bytes, (std::vector<std::uint64_t>{largest, 0, largest}));
  Options o;
  o.source = in;
  o.group = "train";
  o.batch_size = 64;
  ContentDigest from_h5;
  {
    Loader l(o);
    for (Batch& b : l.epoch(0)) from_h5.add(b);
  }
  EXPECT_EQ(stored.content_digest, from_h5.hex());
  o.group.clear();
  o.source = out;
  o.num_workers = 2;
  Loader l(o);
  ContentDigest from_lmdb;
  for (Batch& b : l.epoch(0)) {
    for (std::size_t k = 0; k < b.size(); ++k) {
      const auto s = b["parts"].sample(k);
      ASSERT_EQ(std::vector<std::byte>(s.begin(), s.end()), blob(b.indices()[k]));
    }
    from_lmdb.add(b);
  }
  EXPECT_EQ(from_lmdb.hex(), from_h5.hex());
}

TEST(H5ToLmdb, SelectedFieldsKeepTheirOrder) {
  TempDir tmp;
  Schema schema = small_schema(100);
  write_hdf5(tmp.path("in.h5"), schema, {});
  RunResult r = convert({tmp.path("in.h5"), tmp.path("out.lmdb"), "--fields", "weight,image", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  auto stored = formats::lmdb_stored_schema(tmp.path("out.lmdb"));
  ASSERT_EQ(stored.schema.fields.size(), 2u);
  EXPECT_EQ(stored.schema.fields[0].name, "weight");  // records in the selected order
  Schema delivered = schema;                          // a reader's default order is alphabetical
  delivered.fields = {schema.fields[0], schema.fields[2]};
  expect_lmdb_content(tmp.path("out.lmdb"), delivered);
}

// What the file stores beside its samples (stoker-pack's class names) is carried into the database,
// but the file's digest and what would take the name of one of the database's own records.
TEST(H5ToLmdb, TheFilesMetadataGoesAlong) {
  TempDir tmp;
  const std::string big(2u << 20, 'm');  // more than the map the conversion starts with
  {
    H5Builder b(tmp.path("in.h5"));
    const std::vector<std::int64_t> values{5, 6, 7};
    b.array("label", H5T_STD_I64LE, {3}, values.data());
    b.text_attribute("/", "labels", R"({"label": ["a", "b", "c"]})");
    b.text_attribute("/", "content_digest", "0123456789abcdef");
    b.text_attribute("/", "schema", "not the database's");
    b.text_attribute("/", "progress", "not the conversion's");
    b.text_attribute("/", "notes", big);
    b.text_attribute("/", std::string(600, 'n'), "a name longer than an LMDB key");
  }
  // A map of 64 KiB: the commit that holds the metadata grows it, and is retried with it.
  RunResult r = convert({tmp.path("in.h5"), tmp.path("out.lmdb"), "--quiet", "--map-size", "65536"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is not carried: its name is longer than the 511 bytes of an LMDB key"));
  formats::LmdbReader out(tmp.path("out.lmdb"), {});
  EXPECT_EQ(out.metadata(),
            (std::map<std::string, std::string>{{"labels", R"({"label": ["a", "b", "c"]})"}, {"notes", big}}));
  EXPECT_EQ(out.schema().fields.at(0).name, "label");
}

TEST(H5ToLmdb, ATinyInitialMapGrowsInsteadOfFailing) {
  TempDir tmp;
  Schema schema = small_schema(3000);
  write_hdf5(tmp.path("in.h5"), schema, {});
  RunResult r = convert({tmp.path("in.h5"), tmp.path("out.lmdb"), "--map-size", "65536", "--commit-every", "250"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_lmdb_content(tmp.path("out.lmdb"), schema);
}

TEST(H5ToLmdb, KilledMidwayLeavesNoOutputAndResumeCompletesIdentically) {
  TempDir tmp;
  Schema schema = small_schema(6000);
  const std::string in = tmp.path("in.h5"), out = tmp.path("out.lmdb"), partial = out + ".partial";
  write_hdf5(in, schema, {formats::Hdf5WriteOptions::Layout::chunked, 128, 0});
  // One sample per synced transaction: slow enough to be killed part-way.
  int pid = start_program({kTool, in, out, "--commit-every", "1"});
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(fs::exists(partial) && fs::file_size(partial) > 64 * 1024) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(0, ::kill(pid, SIGKILL));
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st)) << "the conversion finished before it could be killed";
  EXPECT_FALSE(fs::exists(out));
  ASSERT_TRUE(fs::exists(partial));
  // The loader refuses the partial database.
  Options o;
  o.source = partial;
  try {
    Loader loader(o);
    FAIL() << "the loader accepted an incomplete database";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::dataset) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("incomplete"));
  }
  // Without --resume the tool refuses to clobber the partial work.
  RunResult again = convert({in, out});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.err, HasSubstr("--resume"));
  // A different field selection cannot resume it.
  RunResult other = convert({in, out, "--resume", "--fields", "image"});
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_THAT(other.err, HasSubstr("different source or with different fields"));

  RunResult resumed = convert({in, out, "--resume", "--verify"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("resuming"));
  EXPECT_FALSE(fs::exists(partial));
  expect_lmdb_content(out, schema);

  RunResult fresh = convert({in, tmp.path("fresh.lmdb"), "--quiet"});
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(formats::lmdb_stored_schema(out).content_digest,
            formats::lmdb_stored_schema(tmp.path("fresh.lmdb")).content_digest);
  EXPECT_EQ(formats::lmdb_stored_schema(out).content_digest, loader_digest(in));
}

// A directory of HDF5 shards becomes a directory of LMDB shards the loader reads as the same set;
// a conversion stopped at a bad shard keeps the finished ones and --resume completes it.
TEST(H5ToLmdb, AShardSetBecomesAShardSetAndResumesShardByShard) {
  TempDir tmp;
  fs::create_directories(tmp.path("in"));
  const std::uint64_t sizes[] = {300, 200, 250};
  for (int k = 0; k < 3; ++k)
    write_hdf5(tmp.path(fmt::format("in/train-{}.h5", k)), small_schema(sizes[k]),
               {formats::Hdf5WriteOptions::Layout::chunked, 64, 0});
  // Shard 2 is damaged: the conversion stops there, naming it, with nothing at OUTPUT.
  const std::string good = tmp.path("good-2.h5");
  fs::rename(tmp.path("in/train-2.h5"), good);
  { std::ofstream(tmp.path("in/train-2.h5")) << "not an HDF5 file"; }
  const std::string out = tmp.path("out");
  RunResult stopped = convert({tmp.path("in"), out, "--commit-every", "50"});
  EXPECT_EQ(stopped.exit_code, 1);
  EXPECT_THAT(stopped.err, HasSubstr("train-2.h5"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::exists(out + ".partial/train-0.lmdb"));
  EXPECT_TRUE(fs::exists(out + ".partial/train-1.lmdb"));
  RunResult again = convert({tmp.path("in"), out});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.err, HasSubstr("--resume"));
  fs::rename(good, tmp.path("in/train-2.h5"));
  // A database in the directory that is none of the set's is refused, never moved into place.
  write_lmdb(out + ".partial/stray.lmdb", small_schema(3));
  RunResult stray = convert({tmp.path("in"), out, "--resume"});
  EXPECT_EQ(stray.exit_code, 1);
  EXPECT_THAT(stray.err, HasSubstr("holds stray.lmdb, which is none of the set's shards"));
  fs::remove(out + ".partial/stray.lmdb");
  // A finished shard whose source changed since is converted again, not kept.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a modification time of its own
  fs::remove(tmp.path("in/train-1.h5"));
  write_hdf5(tmp.path("in/train-1.h5"), small_schema(sizes[1] + 1),
             {formats::Hdf5WriteOptions::Layout::chunked, 64, 0});
  RunResult resumed = convert({tmp.path("in/train-*.h5"), out, "--resume", "--verify"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("3 shards"));
  EXPECT_THAT(resumed.err, HasSubstr("train-1.h5: changed since it was converted ("));
  EXPECT_THAT(resumed.err, HasSubstr("1 kept from the interrupted run"));
  EXPECT_FALSE(fs::exists(out + ".partial"));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"train-0.lmdb", "train-1.lmdb", "train-2.lmdb"}));
  for (int k = 0; k < 3; ++k)
    expect_lmdb_content(fmt::format("{}/train-{}.lmdb", out, k), small_schema(sizes[k] + (k == 1 ? 1 : 0)));
  EXPECT_EQ(loader_digest(out), loader_digest(tmp.path("in")));
}

// OUTPUT/ names OUTPUT: the work goes to OUTPUT.partial beside it, never into a hidden
// OUTPUT/.partial inside a directory.
TEST(H5ToLmdb, AnOutputWithATrailingSlashIsWrittenWhereItsNameSays) {
  TempDir tmp;
  fs::create_directories(tmp.path("in"));
  write_hdf5(tmp.path("in/a-0.h5"), small_schema(20), {});
  write_hdf5(tmp.path("in/a-1.h5"), small_schema(30), {});
  RunResult r = convert({tmp.path("in"), tmp.path("out") + "/", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_directory(tmp.path("out")));
  EXPECT_FALSE(fs::exists(tmp.path("out/.partial")));
  EXPECT_FALSE(fs::exists(tmp.path("out.partial")));
  EXPECT_EQ(loader_digest(tmp.path("out")), loader_digest(tmp.path("in")));
}

TEST(H5ToLmdb, ForceReplacesAnLmdbFileOrDirectoryAtomically) {
  TempDir tmp;
  Schema schema = small_schema(50);
  write_hdf5(tmp.path("in.h5"), schema, {});
  write_lmdb(tmp.path("out.lmdb"), small_schema(7));
  RunResult refused = convert({tmp.path("in.h5"), tmp.path("out.lmdb")});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.err,
            "h5-to-lmdb: " + tmp.path("out.lmdb") + ": already exists (an LMDB database); use --force to replace it\n");
  expect_lmdb_content(tmp.path("out.lmdb"), small_schema(7));
  RunResult forced = convert({tmp.path("in.h5"), tmp.path("out.lmdb"), "--force", "--quiet"});
  ASSERT_EQ(forced.exit_code, 0) << forced.err;
  expect_lmdb_content(tmp.path("out.lmdb"), schema);

  fs::create_directories(tmp.path("dir.lmdb"));
  write_lmdb(tmp.path("dir.lmdb") + "/data.mdb", small_schema(7));
  RunResult dir = convert({tmp.path("in.h5"), tmp.path("dir.lmdb"), "--force", "--quiet"});
  ASSERT_EQ(dir.exit_code, 0) << dir.err;
  EXPECT_TRUE(fs::is_regular_file(tmp.path("dir.lmdb")));
  expect_lmdb_content(tmp.path("dir.lmdb"), schema);
  EXPECT_FALSE(fs::exists(tmp.path("dir.lmdb.partial")));
}

// --force replaces what h5-to-lmdb writes, never what it was pointed at by mistake: a directory of
// someone's files (the folder of the HDF5 shards, say), a file that merely has the name, the input.
TEST(H5ToLmdb, ForceNeverReplacesWhatH5ToLmdbDoesNotWriteAndSaysWhatIsThere) {
  TempDir tmp;
  write_hdf5(tmp.path("in.h5"), small_schema(5), {});
  fs::create_directories(tmp.path("data/sub"));
  write_hdf5(tmp.path("data/a.h5"), small_schema(5), {});
  { std::ofstream(tmp.path("data/b.txt")) << "notes"; }
  { std::ofstream(tmp.path("text.lmdb")) << "old"; }
  const auto listing = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(tmp.dir()))
      names.push_back(fs::relative(e.path(), tmp.dir()).string() + ":" +
                      (e.is_regular_file() ? std::to_string(e.file_size()) : "dir"));
    std::sort(names.begin(), names.end());
    return names;
  };
  const auto before = listing();
  const std::string data = tmp.path("data");
  RunResult dir = convert({tmp.path("in.h5"), data, "--force"});
  EXPECT_EQ(dir.exit_code, 1);
  EXPECT_EQ(dir.err, "h5-to-lmdb: " + data +
                         ": is a directory holding 2 files and 1 folder (a.h5 is an HDF5 file, which h5-to-lmdb does "
                         "not write): not replaced; name a new path\n");
  RunResult set = convert({data, data, "--force"});  // a shard set converted onto its own folder
  EXPECT_EQ(set.exit_code, 1);
  EXPECT_EQ(set.err, dir.err);
  RunResult text = convert({tmp.path("in.h5"), tmp.path("text.lmdb"), "--force"});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_EQ(text.err, "h5-to-lmdb: " + tmp.path("text.lmdb") +
                          ": is a file of 3 B, not an LMDB database: not replaced; name a new path\n");
  RunResult input = convert({tmp.path("in.h5"), tmp.path("in.h5"), "--force"});
  EXPECT_EQ(input.exit_code, 1);
  EXPECT_EQ(input.err, "h5-to-lmdb: " + tmp.path("in.h5") +
                           ": is an HDF5 file, which h5-to-lmdb does not write: not replaced; name a new path\n");
  EXPECT_EQ(listing(), before);
  // Nor is an OUTPUT.partial discarded that is not an interrupted conversion.
  fs::create_directories(tmp.path("out.lmdb.partial"));
  { std::ofstream(tmp.path("out.lmdb.partial/keep.txt")) << "keep"; }
  const auto with_partial = listing();
  RunResult partial = convert({tmp.path("in.h5"), tmp.path("out.lmdb"), "--force"});
  EXPECT_EQ(partial.exit_code, 1);
  EXPECT_EQ(partial.err,
            "h5-to-lmdb: " + tmp.path("out.lmdb.partial") +
                ": is a directory holding 1 file (keep.txt is a file of 4 B, not an LMDB database), not an "
                "interrupted run of h5-to-lmdb: not removed; remove it yourself or name a new path\n");
  for (const RunResult* r : {&dir, &set, &text, &input, &partial}) EXPECT_THAT(r->err, Not(HasSubstr("--force")));
  EXPECT_EQ(listing(), with_partial);
}

// A shard's file name is any bytes: it is converted (its journal entry JSON, which holds UTF-8
// text, records it escaped) and printed escaped, never acting on the terminal.
TEST(H5ToLmdb, AShardNamedWithATerminalEscapeAndBytesThatAreNotUtf8IsConvertedAndPrintedEscaped) {
  TempDir tmp;
  const std::string odd = "a\x1b[31m\xfe";
  fs::create_directories(tmp.path("in"));
  write_hdf5(tmp.path("in/" + odd + ".h5"), small_schema(20), {});
  write_hdf5(tmp.path("in/b.h5"), small_schema(30), {});
  RunResult r = convert({tmp.path("in"), tmp.path("out")});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("h5-to-lmdb: shard 1 of 2: " + tmp.path("in") + "/a\\x1b[31m\\xfe.h5\n"));
  EXPECT_THAT(r.err, HasSubstr("-> " + tmp.path("out.partial") + "/a\\x1b[31m\\xfe.lmdb (content_digest "));
  EXPECT_EQ(r.err.find_first_of("\x1b\xfe"), std::string::npos);
  expect_lmdb_content(tmp.path("out/" + odd + ".lmdb"), small_schema(20));
  expect_lmdb_content(tmp.path("out/b.lmdb"), small_schema(30));
}

// A symbolic link planted at OUTPUT.partial (in a shared directory, by another user) is refused,
// dangling or not: the conversion never creates or writes the file it points to.
TEST(H5ToLmdb, ASymlinkAtThePartialOutputIsRefusedAndNotFollowed) {
  TempDir tmp;
  write_hdf5(tmp.path("in.h5"), small_schema(5), {});
  const std::string victim = tmp.path("victim");
  fs::create_symlink(victim, tmp.path("out.lmdb.partial"));
  for (const char* flag : {"--quiet", "--force", "--resume"}) {
    RunResult r = convert({tmp.path("in.h5"), tmp.path("out.lmdb"), flag});
    EXPECT_EQ(r.exit_code, 1) << flag;
    EXPECT_THAT(r.err, HasSubstr("out.lmdb.partial: is a symbolic link; h5-to-lmdb writes only a file it creates "
                                 "itself: remove the link"))
        << flag;
    EXPECT_FALSE(fs::exists(victim)) << flag;
  }
  fs::remove(tmp.path("out.lmdb.partial"));
  RunResult ok = convert({tmp.path("in.h5"), tmp.path("out.lmdb"), "--quiet"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  expect_lmdb_content(tmp.path("out.lmdb"), small_schema(5));
}

TEST(H5ToLmdb, BadInputsGiveTheirMessageAndExitCode) {
  TempDir tmp;
  const std::string out = tmp.path("out.lmdb");
  RunResult missing = convert({tmp.path("missing.h5"), out});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("h5-to-lmdb: " + tmp.path("missing.h5") + ": No such file"));

  { std::ofstream(tmp.path("text.h5")) << "not hdf5"; }
  RunResult text = convert({tmp.path("text.h5"), out});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_THAT(text.err, HasSubstr("not an HDF5 file"));

  auto make = [&](const std::string& name, hid_t type1, hsize_t n1, hid_t type2, hsize_t n2) {
    hid_t f = H5Fcreate(tmp.path(name).c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d1[1] = {n1}, d2[1] = {n2};
    hid_t s1 = H5Screate_simple(1, d1, nullptr), s2 = H5Screate_simple(1, d2, nullptr);
    H5Dclose(H5Dcreate2(f, "count", type1, s1, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Dclose(H5Dcreate2(f, "label", type2, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Sclose(s1);
    H5Sclose(s2);
    H5Fclose(f);
  };
  hid_t twelve_bits = H5Tcopy(H5T_STD_U16LE);  // a type no array library delivers
  H5Tset_precision(twelve_bits, 12);
  make("u12.h5", twelve_bits, 10, H5T_STD_I64LE, 10);
  H5Tclose(twelve_bits);
  RunResult u12 = convert({tmp.path("u12.h5"), out});
  EXPECT_EQ(u12.exit_code, 1);
  EXPECT_THAT(u12.err, HasSubstr("u12.h5: dataset 'count': unsupported dtype (integer with 12 bits of precision"));

  make("n.h5", H5T_STD_I32LE, 10, H5T_STD_I64LE, 12);
  RunResult n = convert({tmp.path("n.h5"), out});
  EXPECT_EQ(n.exit_code, 1);
  EXPECT_THAT(n.err, HasSubstr("different numbers of samples"));
  EXPECT_FALSE(fs::exists(out));

  RunResult usage = convert({"--no-such-flag"});
  EXPECT_EQ(usage.exit_code, 2);
  RunResult help = convert({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--resume"));
}

TEST(H5ToLmdb, AFullDiskIsAnErrorNotACrash) {
  TempDir tmp;
  Schema schema = small_schema(60000);  // ~4.6 MB of records
  write_hdf5(tmp.path("in.h5"), schema, {});
  const std::string small = tmp.path("small");
  const int rc = with_small_tmpfs(small, 1 << 20, [&] {
    RunResult r = convert({tmp.path("in.h5"), small + "/out.lmdb", "--quiet"});
    std::fprintf(stderr, "exit %d: %s\n", r.exit_code, r.err.c_str());
    const bool ok =
        r.exit_code == 1 && r.err.find("is the disk full?") != std::string::npos && !fs::exists(small + "/out.lmdb");
    return ok ? 0 : 1;
  });
  if (rc == 77) GTEST_SKIP() << "this system lets the test mount no tmpfs (neither root nor user namespaces)";
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace stoker::test
