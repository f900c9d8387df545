// stoker-pack's PrepareQueue: files handed out in plan order, and a file that does not come (a
// FIFO no one writes, a stalled network mount) holding back none of the files before it.
#include "tools/pack/pack_queue.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <string>

#include "stoker/options.h"
#include "tests/support/test_data.h"
#include "tests/support/test_images.h"

namespace stoker::test {
namespace {

using tools::PackItem;
using tools::PackPlan;
using tools::PrepareQueue;

std::vector<std::byte> write_png(const std::string& path, int side, std::uint8_t value) {
  const std::vector<std::uint8_t> rgb(static_cast<std::size_t>(side) * side * 3, value);
  std::vector<std::byte> png = encode_png(rgb, side, side);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), std::ssize(png));
  return png;
}

// Opens the FIFO for writing, which lets the reader blocked in open() go on, and closes it: the
// reader then finds no regular file.
void let_through(const std::string& fifo) {
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << fifo;
  ::close(fd);
}

TEST(PrepareQueue, FilesBeforeOneThatDoesNotComeAreHandedOutMeanwhile) {
  TempDir tmp;
  PackPlan plan;
  std::vector<std::vector<std::byte>> want;
  for (int i = 0; i < 3; ++i) {
    const std::string path = tmp.path(fmt::format("{}.png", i));
    want.push_back(write_png(path, 4 + i, static_cast<std::uint8_t>(i * 40)));
    plan.items.push_back(PackItem{path, path, {}});
  }
  // The fourth file blocks its reader until the test opens it for writing; then more files, so
  // that the consumer's wait for several files in a row spans it.
  const std::string fifo = tmp.path("3.png");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  plan.items.push_back(PackItem{fifo, fifo, {}});
  for (int i = 4; i < 6; ++i) {
    const std::string path = tmp.path(fmt::format("{}.png", i));
    want.push_back(write_png(path, 4 + i, static_cast<std::uint8_t>(i * 40)));
    plan.items.push_back(PackItem{path, path, {}});
  }

  tools::ImageRules rules;
  rules.max_pixels = kDefaultMaxImagePixels;
  PrepareQueue queue(plan, rules, 1, 0);
  // The consumer in a thread of its own: were it held back, the test fails (and lets the reader
  // through) instead of hanging.
  auto before = std::async(std::launch::async, [&] {
    for (std::uint64_t i = 0; i < 3; ++i) {
      const PrepareQueue::Prepared p = queue.wait(i);
      EXPECT_EQ(p.error, "") << "file " << i;
      EXPECT_TRUE(std::equal(p.bytes.begin(), p.bytes.end(), want[i].begin(), want[i].end())) << "file " << i;
      queue.release(i);
    }
  });
  const bool handed_out = before.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(handed_out) << "the three files before the FIFO were held back while it blocked";
  let_through(fifo);
  before.get();

  const PrepareQueue::Prepared p = queue.wait(3);
  EXPECT_NE(p.error.find("3.png: not a regular file"), std::string::npos) << p.error;
  queue.release(3);
  for (std::uint64_t i = 4; i < 6; ++i) {
    const PrepareQueue::Prepared q = queue.wait(i);
    EXPECT_TRUE(std::equal(q.bytes.begin(), q.bytes.end(), want[i - 1].begin(), want[i - 1].end())) << "file " << i;
    queue.release(i);
  }
}

}  // namespace
}  // namespace stoker::test
