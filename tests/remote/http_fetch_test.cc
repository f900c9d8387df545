// One object's bytes into a file (remote/http_fetch.h), larger than the pieces it is written in: a
// transfer broken off mid-body leaves every byte that came in the file, and the resume asks for the
// rest; a disk with no room for the object fails before a byte is fetched.
#include "remote/http_fetch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "remote/content_digest.h"
#include "stoker/error.h"
#include "tests/remote/remote_fixtures.h"
#include "tests/support/run_process.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

// 3 MiB and a bit of random bytes in `dir`/big.bin: more than the 1 MiB a fetch writes at once.
std::string write_big_object(const TempDir& tmp, const std::string& dir) {
  std::filesystem::create_directories(tmp.path(dir));
  std::string bytes((3u << 20) + 12345, '\0');
  std::mt19937_64 rng(7);
  for (char& c : bytes) c = static_cast<char>(rng());
  std::ofstream(tmp.path(dir + "/big.bin"), std::ios::binary) << bytes;
  return bytes;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

remote::FetchPolicy quick_policy() {
  remote::FetchPolicy policy;
  policy.timeout = std::chrono::seconds(20);
  policy.first_backoff = std::chrono::milliseconds(10);
  return policy;
}

TEST(HttpFetch, ALargeObjectBrokenOffMidBodyIsResumedWhereItsBytesEnd) {
  TempDir tmp;
  const std::string bytes = write_big_object(tmp, "served");
  // Broken off after 1.5 MiB (one piece written, half of the next held back), then after 1.1 MiB
  // more: every byte that came is in the file, and each resume asks for the rest.
  FaultServer server(tmp, tmp.path("served"), R"({"big.bin": ["reset:1572864", "reset:1153434"]})");
  const remote::RemoteObject object{server.url("big.bin"), server.url("big.bin"), {}};
  remote::FetchCounters counters;
  const std::string partial = tmp.path("big.bin.partial");
  const std::uint64_t digest =
      remote::fetch_object(object, remote::ObjectInfo{bytes.size(), ""}, partial, quick_policy(), counters);

  EXPECT_TRUE(file_bytes(partial) == bytes);  // not EXPECT_EQ: 3 MiB in a failure message
  remote::ContentDigest whole;
  whole.add(bytes.data(), bytes.size());
  EXPECT_EQ(digest, whole.value());
  EXPECT_EQ(counters.bytes.load(), bytes.size());
  EXPECT_EQ(counters.retries.load(), 2u);
  EXPECT_EQ(server.log(), "GET big.bin -\nGET big.bin bytes=1572864-\nGET big.bin bytes=2726298-\n");
}

TEST(HttpFetch, ADiskWithoutRoomForTheObjectFailsBeforeAByteIsFetched) {
  TempDir tmp;
  const std::string bytes = write_big_object(tmp, "served");
  FaultServer server(tmp, tmp.path("served"));
  const std::string disk = tmp.path("disk");
  const int rc = with_small_tmpfs(disk, 1u << 20, [&] {
    const remote::RemoteObject object{server.url("big.bin"), "http://store/big.bin", {}};
    remote::FetchCounters counters;
    try {
      remote::fetch_object(object, remote::ObjectInfo{bytes.size(), ""}, disk + "/big.bin.partial", quick_policy(),
                           counters);
    } catch (const Error& e) {
      const std::string want = fmt::format(
          "writing the download of http://store/big.bin: No space left on device ({0} of its {0} bytes still to come)",
          bytes.size());
      if (e.code() == ErrorCode::io && e.what() == want && counters.bytes == 0) return 0;
      std::fprintf(stderr, "got: %s (%llu bytes fetched)\n", e.what(),
                   static_cast<unsigned long long>(counters.bytes.load()));
      return 1;
    }
    return 2;
  });
  if (rc == 77) GTEST_SKIP() << "no mount namespace for a small tmpfs here";
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(server.log(), "");
}

}  // namespace
}  // namespace stoker::test
