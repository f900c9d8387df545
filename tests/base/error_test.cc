// base: stoker::Error's codes and the errors of OS calls.
#include "stoker/error.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <fstream>
#include <set>
#include <string>

#include "base/env.h"
#include "base/posix_error.h"
#include "base/unique_fd.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

TEST(ErrorCodes, EveryCodeHasItsOwnName) {
  std::set<std::string_view> names;
  for (auto c = static_cast<int>(ErrorCode::invalid_option); c <= static_cast<int>(ErrorCode::transform); ++c) {
    const std::string_view name = error_code_name(static_cast<ErrorCode>(c));
    EXPECT_NE(name, "unknown") << c;
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(error_code_from_wire(static_cast<std::uint64_t>(c)), static_cast<ErrorCode>(c));
  }
  EXPECT_EQ(error_code_name(ErrorCode::transform), "transform");
  // A number from another process that names no code is stoker's own fault.
  EXPECT_EQ(error_code_from_wire(0), ErrorCode::internal);
  EXPECT_EQ(error_code_from_wire(static_cast<std::uint64_t>(ErrorCode::transform) + 1), ErrorCode::internal);
  EXPECT_EQ(error_code_from_wire(std::uint64_t{1} << 40), ErrorCode::internal);
  EXPECT_EQ(error_code_from_wire(static_cast<std::uint64_t>(-1)), ErrorCode::internal);  // a signed status, cast
  EXPECT_EQ(error_code_name(ErrorCode::worker_died), "worker_died");
  EXPECT_EQ(error_code_name(static_cast<ErrorCode>(200)), "unknown");
  // User code's errors (a pipeline operation's) are about the sample.
  EXPECT_EQ(Error("bad sample").code(), ErrorCode::dataset);
}

TEST(ErrorCodes, AnOsErrorNamesItsContextTextAndErrno) {
  const Error e = Error::from_errno(ENOENT, "train.h5");
  EXPECT_STREQ(e.what(), "train.h5: No such file or directory (ENOENT)");
  EXPECT_EQ(e.code(), ErrorCode::io);
  EXPECT_EQ(Error::from_errno(EACCES, "x", ErrorCode::dataset).code(), ErrorCode::dataset);
}

// An Env whose pread fails with `error`, or returns end of file when it is -1.
class FailingRead : public detail::Env {
 public:
  explicit FailingRead(int error) : error_(error), previous_(detail::Env::install(this)) {}
  ~FailingRead() override { detail::Env::install(previous_); }
  ssize_t pread(int, void*, std::size_t, off_t) override {
    if (error_ < 0) return 0;
    errno = error_;
    return -1;
  }

 private:
  int error_;
  detail::Env* previous_;
};

TEST(PreadExact, AnErrorIsIoAndAnEarlyEndIsATruncatedDataset) {
  TempDir tmp;
  const std::string path = tmp.path("f");
  std::ofstream(path) << "0123456789";
  detail::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd);
  char buf[10];
  detail::pread_exact(fd.get(), buf, 10, 0, path);
  EXPECT_EQ(std::string(buf, 10), "0123456789");
  try {
    detail::pread_exact(fd.get(), buf, 10, 5, path);
    FAIL() << "read past the end";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::dataset);
    EXPECT_THAT(e.what(), HasSubstr("unexpected end of file at offset 10"));
  }
  {
    FailingRead eio(EIO);
    try {
      detail::pread_exact(fd.get(), buf, 4, 0, path);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::io);
      EXPECT_THAT(e.what(), HasSubstr("read of 4 bytes at offset 0: Input/output error (EIO)"));
    }
  }
}

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(detail::format_bytes(512), "512 B");
  EXPECT_EQ(detail::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(detail::format_bytes(std::uint64_t{3} << 30), "3.0 GiB");
}

}  // namespace
}  // namespace stoker::test
