// stoker-pack run as a user runs it: what --force may replace, and a full disk.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "formats/open_reader.h"
#include "formats/shard_set.h"
#include "tests/support/run_process.h"
#include "tests/support/test_data.h"
#include "tests/support/test_images.h"

namespace stoker::test {
namespace {

namespace fs = std::filesystem;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::string kPack = STOKER_PACK;

RunResult pack(std::vector<std::string> args) {
  args.insert(args.begin(), kPack);
  return run_program(args);
}

// An ImageFolder tree: ROOT/a/ and ROOT/b/, each with `per_class` PNGs of 16 x 16 noise.
void make_image_folder(const std::string& root, int per_class) {
  std::uint32_t seed = 1;
  for (const char* cls : {"a", "b"}) {
    fs::create_directories(fs::path(root) / cls);
    for (int k = 0; k < per_class; ++k) {
      std::vector<std::uint8_t> rgb(16 * 16 * 3);
      for (auto& v : rgb) v = static_cast<std::uint8_t>((seed = seed * 1664525u + 1013904223u) >> 24);
      const auto png = encode_png(rgb, 16, 16);
      std::ofstream(fs::path(root) / cls / (std::to_string(k) + ".png"), std::ios::binary)
          .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
    }
  }
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Every file under `dir`, by relative path, with its bytes; folders as "<dir>".
std::map<std::string, std::string> contents_of(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = fs::relative(e.path(), dir).string();
    if (e.is_directory()) {
      out[name] = "<dir>";
    } else {
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream bytes;
      bytes << in.rdbuf();
      out[name] = bytes.str();
    }
  }
  return out;
}

// Samples in a dataset or a directory of shards, as the loader reads it.
std::uint64_t samples_in(const std::string& path) {
  return formats::open_reader(formats::resolve_source({path}), formats::ReaderOptions{})->schema().num_samples;
}

// --force replaces what stoker-pack writes, never what it was pointed at by mistake: the folder of
// images itself, a directory of someone's files, a shard set someone added a file to, a link.
TEST(StokerPack, ForceNeverReplacesADirectoryOfOtherFilesAndSaysWhatIsThere) {
  TempDir tmp;
  const std::string photos = tmp.path("photos");
  make_image_folder(photos, 3);
  fs::create_directories(tmp.path("notes"));
  write_file(tmp.path("notes/a.txt"), "abc");
  write_file(tmp.path("notes/b.jpg"), "not a jpeg");
  const auto photos_before = contents_of(photos), notes_before = contents_of(tmp.path("notes"));

  RunResult onto_source = pack({"--folder", photos, photos, "--force", "--quiet"});
  EXPECT_EQ(onto_source.exit_code, 1);
  EXPECT_EQ(onto_source.err, "stoker-pack: " + photos +
                                 ": is a directory holding 2 folders (a is a folder): not replaced; name a new "
                                 "path\n");
  RunResult onto_notes = pack({"--folder", photos, tmp.path("notes"), "--force", "--quiet"});
  EXPECT_EQ(onto_notes.exit_code, 1);
  EXPECT_EQ(onto_notes.err, "stoker-pack: " + tmp.path("notes") +
                                ": is a directory holding 2 files (a.txt is a file of 3 B, neither an LMDB database "
                                "nor an HDF5 file): not replaced; name a new path\n");

  // A shard set with a file of someone else's in it.
  RunResult set = pack({"--folder", photos, tmp.path("set"), "--shard-size", "1KiB", "--quiet"});
  ASSERT_EQ(set.exit_code, 0) << set.err;
  write_file(tmp.path("set/zz-notes.txt"), "mine!");
  const auto set_before = contents_of(tmp.path("set"));
  RunResult onto_set = pack({"--folder", photos, tmp.path("set"), "--shard-size", "1KiB", "--force", "--quiet"});
  EXPECT_EQ(onto_set.exit_code, 1);
  EXPECT_THAT(onto_set.err, HasSubstr(" (zz-notes.txt is a file of 5 B, neither an LMDB database nor an HDF5 "
                                      "file): not replaced; name a new path\n"));

  // A link, dangling or not, is not followed.
  fs::create_symlink(photos, tmp.path("link.lmdb"));
  RunResult onto_link = pack({"--folder", photos, tmp.path("link.lmdb"), "--force", "--quiet"});
  EXPECT_EQ(onto_link.exit_code, 1);
  EXPECT_EQ(onto_link.err, "stoker-pack: " + tmp.path("link.lmdb") + ": is a symbolic link to " + photos +
                               ": not replaced; name a new path\n");

  // An OUTPUT.partial that is not an interrupted pack is not discarded either.
  fs::create_directories(tmp.path("out.lmdb.partial"));
  write_file(tmp.path("out.lmdb.partial/a.txt"), "abc");
  RunResult onto_partial = pack({"--folder", photos, tmp.path("out.lmdb"), "--force", "--quiet"});
  EXPECT_EQ(onto_partial.exit_code, 1);
  EXPECT_EQ(onto_partial.err, "stoker-pack: " + tmp.path("out.lmdb.partial") +
                                  ": is a directory holding 1 file (a.txt is a file of 3 B, neither an LMDB database "
                                  "nor an HDF5 file), not an interrupted run of stoker-pack: not removed; remove it "
                                  "yourself or name a new path\n");

  for (const RunResult* r : {&onto_source, &onto_notes, &onto_set, &onto_link, &onto_partial})
    EXPECT_THAT(r->err, Not(HasSubstr("--force")));
  EXPECT_EQ(contents_of(photos), photos_before);
  EXPECT_EQ(contents_of(tmp.path("notes")), notes_before);
  EXPECT_EQ(contents_of(tmp.path("set")), set_before);
  EXPECT_TRUE(fs::is_symlink(tmp.path("link.lmdb")));
  EXPECT_EQ(contents_of(tmp.path("out.lmdb.partial")), (std::map<std::string, std::string>{{"a.txt", "abc"}}));
  EXPECT_FALSE(fs::exists(tmp.path("out.lmdb")));
}

TEST(StokerPack, ForceReplacesADatasetItWroteAndWithoutForceTheMessageSuggestsIt) {
  TempDir tmp;
  make_image_folder(tmp.path("three"), 3);
  make_image_folder(tmp.path("five"), 5);
  for (const auto& [name, what, extra] :
       {std::tuple<std::string, std::string, std::vector<std::string>>{"out.lmdb", "an LMDB database", {}},
        {"out.h5", "an HDF5 file", {}},
        {"set", "a shard set of 6 datasets", {"--shard-size", "1B"}}}) {
    SCOPED_TRACE(name);
    const std::string out = tmp.path(name);
    std::vector<std::string> first{"--folder", tmp.path("three"), out, "--quiet"};
    first.insert(first.end(), extra.begin(), extra.end());
    RunResult made = pack(first);
    ASSERT_EQ(made.exit_code, 0) << made.err;
    std::vector<std::string> again{"--folder", tmp.path("five"), out, "--quiet"};
    again.insert(again.end(), extra.begin(), extra.end());
    RunResult refused = pack(again);
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_EQ(refused.err, "stoker-pack: " + out + ": already exists (" + what + "); use --force to replace it\n");
    EXPECT_EQ(samples_in(out), 6u);
    again.push_back("--force");
    RunResult forced = pack(again);
    ASSERT_EQ(forced.exit_code, 0) << forced.err;
    EXPECT_EQ(samples_in(out), 10u);
    EXPECT_FALSE(fs::exists(out + ".partial"));
  }
}

// A write that fails (a full disk; here a file-size limit, EFBIG, which any user can set) ends the
// pack with exit 1 and the error, never a crash in HDF5, and an HDF5 dataset's unfinished file
// removed: it cannot be continued. An LMDB's work stays for --resume.
TEST(StokerPack, AWriteThatFailsIsExit1WithTheUnfinishedHdf5FileRemoved) {
  TempDir tmp;
  const std::string root = tmp.path("photos");
  make_image_folder(root, 100);
  constexpr std::uint64_t kLimit = 64 << 10;  // the images take about 200 KiB

  const std::string out = tmp.path("out.h5");
  RunResult one = run_program_with_file_limit({kPack, "--folder", root, out, "--quiet"}, kLimit);
  EXPECT_EQ(one.signal, 0) << one.err;
  EXPECT_EQ(one.exit_code, 1) << one.err;
  EXPECT_THAT(one.err, StartsWith("stoker-pack: " + out + ".partial: "));
  EXPECT_THAT(one.err, EndsWith(": File too large (EFBIG)\n"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));

  // A shard set keeps its journal (and any finished shard) for --resume; the unfinished shard goes.
  const std::string set = tmp.path("set.h5");
  RunResult sharded =
      run_program_with_file_limit({kPack, "--folder", root, set, "--shard-size", "1MiB", "--quiet"}, kLimit);
  EXPECT_EQ(sharded.signal, 0) << sharded.err;
  EXPECT_EQ(sharded.exit_code, 1) << sharded.err;
  EXPECT_THAT(sharded.err, StartsWith("stoker-pack: " + set + ".partial/shard-00000.h5.partial: "));
  EXPECT_THAT(sharded.err, EndsWith(": File too large (EFBIG)\n"));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(set + ".partial")) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"pack.json"});
  RunResult resumed = pack({"--folder", root, set, "--shard-size", "1MiB", "--resume", "--quiet"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(samples_in(set), 200u);

  const std::string lmdb = tmp.path("out.lmdb");
  RunResult in_lmdb = run_program_with_file_limit({kPack, "--folder", root, lmdb, "--quiet"}, kLimit);
  EXPECT_EQ(in_lmdb.signal, 0) << in_lmdb.err;
  EXPECT_EQ(in_lmdb.exit_code, 1) << in_lmdb.err;
  EXPECT_TRUE(fs::exists(lmdb + ".partial"));
  RunResult continued = pack({"--folder", root, lmdb, "--resume", "--quiet"});
  ASSERT_EQ(continued.exit_code, 0) << continued.err;
  EXPECT_EQ(samples_in(lmdb), 200u);
}

// The same onto a disk that really fills up (ENOSPC), where the test may mount a small tmpfs.
TEST(StokerPack, AFullDiskIsExit1WithTheUnfinishedHdf5FileRemoved) {
  TempDir tmp;
  const std::string root = tmp.path("photos"), small = tmp.path("small");
  make_image_folder(root, 100);
  const int rc = with_small_tmpfs(small, 64 << 10, [&] {
    const std::string out = small + "/out.h5";
    RunResult r = pack({"--folder", root, out, "--quiet"});
    const bool ok = r.signal == 0 && r.exit_code == 1 && r.err.starts_with("stoker-pack: " + out + ".partial: ") &&
                    r.err.ends_with(": No space left on device (ENOSPC)\n") && !fs::exists(out) &&
                    !fs::exists(out + ".partial");
    if (!ok) std::fprintf(stderr, "exit %d, signal %d: %s\n", r.exit_code, r.signal, r.err.c_str());
    return ok ? 0 : 1;
  });
  if (rc == 77) GTEST_SKIP() << "this system lets the test mount no tmpfs (neither root nor user namespaces)";
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace stoker::test
