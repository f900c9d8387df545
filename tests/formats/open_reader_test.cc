// formats: which format a path holds.
#include "formats/open_reader.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <vector>

#include "formats/hdf5/hdf5_writer.h"
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

// A writer killed before it closes its file leaves an HDF5 file on disk, whatever it wrote: an
// interrupted run's unfinished file is known as the tool's own by its format (tools/common/output_check.h).
TEST(DetectFormat, AnHdf5FileBeingWrittenIsOneOnDiskBeforeItIsClosed) {
  TempDir tmp;
  const Schema schema = small_schema(1000);
  formats::Hdf5Writer w(tmp.path("open.h5"), schema, {formats::Hdf5WriteOptions::Layout::chunked, 64, 0});
  const std::vector<std::byte> image = expected_field(schema.fields[0], 0);
  for (std::uint64_t i = 0; i < 500; ++i) w.write(0, i, 1, image.data());
  EXPECT_EQ(formats::detect_format(tmp.path("open.h5")), Format::hdf5) << "its superblock is not on disk yet";
}

TEST(OpenReader, AGroupForAnLmdbDatabaseIsAnOptionToFix) {
  TempDir tmp;
  write_lmdb(tmp.path("a.lmdb"), small_schema(5));
  formats::ReaderOptions o;
  o.group = "train";
  expect_error(ErrorCode::invalid_option, [&] { formats::open_reader(tmp.path("a.lmdb"), o); },
               {"a.lmdb", "is an LMDB database; a group"});
}

// A path that is missing is the dataset's fault; running out of descriptors is the system's, and
// may pass: the two get different codes. The EMFILE is real, in a child with no descriptor left.
TEST(OpenReader, RunningOutOfFileDescriptorsIsAnIoErrorNotABadDataset) {
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizer build is ASan with UBSan, whose vptr check probes memory through a pipe: in a
  // process with no descriptor left, every stoker::Error constructed reads as an invalid object.
  GTEST_SKIP() << "UBSan's vptr check needs descriptors, which this test leaves none of";
#endif
  TempDir tmp;
  write_hdf5(tmp.path("a.h5"), small_schema(5), {});
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int highest = 0;
    for (int fd = 0; fd < 1024; ++fd) {
      if (::fcntl(fd, F_GETFD) != -1) highest = fd;
    }
    const rlimit none{static_cast<rlim_t>(highest + 1), static_cast<rlim_t>(highest + 1)};
    if (::setrlimit(RLIMIT_NOFILE, &none) != 0) ::_exit(2);
    while (::dup(0) >= 0) {
    }  // fills any gap below the limit
    const Caught c = caught([&] { formats::detect_format(tmp.path("a.h5")); });
    const bool ok = c.code == ErrorCode::io && c.message.find("(EMFILE)") != std::string::npos &&
                    c.message.find("a.h5") != std::string::npos;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "detect_format under RLIMIT_NOFILE did not fail with an io error naming EMFILE";
}

}  // namespace
}  // namespace stoker::test
