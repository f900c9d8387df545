// Damaged and crafted dataset files opened by a Loader with workers: HDF5 and LMDB are not
// hardened against them, so every reading of such a file happens in a process that may die of it
// (the probe, the workers), never in the test process. Each outcome is the epoch read to its end or a
// stoker::Error naming the file; a signal here ends the whole suite, which is the failure this test
// exists to catch.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>

#include "base/splitmix64.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Options hostile_options(const std::string& source) {
  Options o;
  o.source = source;
  o.num_workers = 2;
  o.batch_size = 7;
  // A damaged file can make HDF5 loop forever: a short timeout turns that into an error quickly.
  o.timeout = std::chrono::milliseconds(2000);
  o.max_respawns = 1;
  o.shm_budget = 64u << 20;
  return o;
}

// What became of one damaged copy: "read" or the error's code.
std::string open_and_read(const std::string& path) {
  try {
    Loader loader(hostile_options(path));
    Epoch epoch = loader.epoch(0);
    while (epoch.next()) {
    }
    return "read";
  } catch (const Error& e) {
    // Every error names the file, whatever went wrong with it.
    EXPECT_THAT(e.what(), HasSubstr(path)) << "code " << static_cast<int>(e.code());
    if (std::getenv("STOKER_TEST_VERBOSE")) std::printf("%s\n", e.what());
    return std::to_string(static_cast<int>(e.code()));
  }
}

// Copies of `original` with a few bytes overwritten at places and with values from a fixed seed:
// the same copies on every run, so a failure is reproducible.
std::map<std::string, int> mutate_and_open(const std::string& original, const std::string& copy, int copies,
                                           std::uint64_t seed) {
  const std::vector<char> bytes = read_bytes(original);
  EXPECT_FALSE(bytes.empty());
  std::map<std::string, int> outcomes;
  detail::SplitMix64 random(seed);
  for (int c = 0; c < copies; ++c) {
    std::vector<char> damaged = bytes;
    const int flips = 1 + static_cast<int>(random.next() % 4);
    for (int f = 0; f < flips; ++f) {
      const std::uint64_t r = random.next();
      damaged[r % damaged.size()] = static_cast<char>(r >> 56);
    }
    write_bytes(copy, damaged);
    ++outcomes[open_and_read(copy)];
  }
  return outcomes;
}

std::string summary(const std::map<std::string, int>& outcomes) {
  std::string s;
  for (const auto& [what, n] : outcomes) s += what + ": " + std::to_string(n) + "  ";
  return s;
}

std::vector<std::vector<std::byte>> vlen_samples(int n) {
  std::vector<std::vector<std::byte>> samples;
  for (int i = 0; i < n; ++i) samples.emplace_back(static_cast<std::size_t>(20 + i * 3), std::byte(i));
  return samples;
}

TEST(HostileFiles, ByteFlippedVlenHdf5IsReadOrAnErrorNamingTheFile) {
  TempDir tmp;
  {
    H5Builder b(tmp.path("v.h5"));
    b.vlen("jpeg", vlen_samples(40));
  }
  const auto outcomes = mutate_and_open(tmp.path("v.h5"), tmp.path("damaged.h5"), 60, 1);
  std::printf("vlen HDF5: %s\n", summary(outcomes).c_str());
}

TEST(HostileFiles, ByteFlippedFixedHdf5IsReadOrAnErrorNamingTheFile) {
  TempDir tmp;
  write_hdf5(tmp.path("f.h5"), small_schema(40), {});
  const auto outcomes = mutate_and_open(tmp.path("f.h5"), tmp.path("damaged.h5"), 60, 2);
  std::printf("fixed HDF5: %s\n", summary(outcomes).c_str());
}

TEST(HostileFiles, ByteFlippedLmdbIsReadOrAnErrorNamingTheFile) {
  TempDir tmp;
  write_lmdb(tmp.path("s.lmdb"), small_schema(40));
  std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>> records;
  for (int i = 0; i < 40; ++i) {
    const std::string key = std::to_string(i);
    records.push_back({std::vector<std::byte>(reinterpret_cast<const std::byte*>(key.data()),
                                              reinterpret_cast<const std::byte*>(key.data()) + key.size()),
                       std::vector<std::byte>(static_cast<std::size_t>(30 + i), std::byte(i))});
  }
  write_plain_lmdb(tmp.path("p.lmdb"), records);
  for (const std::string db : {"s.lmdb", "p.lmdb"}) {
    const auto outcomes = mutate_and_open(tmp.path(db), tmp.path("damaged-" + db), 60, 3);
    std::printf("%s: %s\n", db.c_str(), summary(outcomes).c_str());
  }
}

// A dataset whose first read never ends (here a FIFO nobody writes) is an error naming it once the
// timeout passes without progress: the probe that read it is killed, and the loader never blocks
// the trainer.
TEST(HostileFiles, ADatasetWhoseReadNeverEndsIsAnErrorAfterTheTimeout) {
  TempDir tmp;
  const std::string fifo = tmp.path("never.h5");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Options o = hostile_options(fifo);
  o.timeout = std::chrono::milliseconds(300);
  const Caught c = caught([&] { Loader loader(o); });
  EXPECT_EQ(c.code, ErrorCode::dataset) << c.message;
  EXPECT_THAT(c.message, HasSubstr(fifo + ": the process that read its metadata made no progress for 300 ms and "
                                          "was killed"));
  EXPECT_THAT(c.message, HasSubstr("raise Options::timeout if the file is only slow to read"));
  EXPECT_TRUE(descendants().empty());
}

// At the default settings (a timeout of 5 minutes for a worker), a first read that makes no
// progress is an error within 10 s, not 5 minutes.
TEST(HostileFiles, AFirstReadThatMakesNoProgressIsAnErrorWithinSecondsAtTheDefaultTimeout) {
  TempDir tmp;
  const std::string fifo = tmp.path("never.h5");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Options o;
  o.source = fifo;
  o.num_workers = 1;
  const Caught c = caught([&] { Loader loader(o); });
  EXPECT_EQ(c.code, ErrorCode::dataset) << c.message;
  EXPECT_THAT(c.message, HasSubstr(fifo + ": the process that read its metadata made no progress for 10 s and was "
                                          "killed (HDF5 loops forever on some damaged files; each step of reading it "
                                          "(the file opened, a shard, a sample) may take up to that"));
  EXPECT_TRUE(descendants().empty());
}

// One value far larger than the rest (a legitimate outlier, or a damaged record's claim) does not
// set every slot's size: slots are sized from the typical sample, the batch holding the outlier
// still arrives whole, and nothing is reserved for more than the file could hold.
TEST(HostileFiles, OneHugeSampleDoesNotSizeEverySlot) {
  TempDir tmp;
  std::vector<std::vector<std::byte>> samples(60, std::vector<std::byte>(1000, std::byte(7)));
  samples[5].assign(8u << 20, std::byte(9));  // 8 MiB among 1000-byte samples, not one of those probed
  {
    H5Builder b(tmp.path("o.h5"));
    b.vlen("blob", samples);
  }
  Options o = hostile_options(tmp.path("o.h5"));
  o.batch_size = 4;
  Loader loader(o);
  EXPECT_LT(loader.stats().shm_bytes, 4u << 20) << "slots sized for the outlier";
  Epoch epoch = loader.epoch(0);
  std::uint64_t total = 0;
  while (auto batch = epoch.next()) total += batch->field("blob").bytes;
  EXPECT_EQ(total, 59u * 1000 + (8u << 20));
}

}  // namespace
}  // namespace stoker::test
