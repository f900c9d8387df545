// StagedQueue: when the training loop waits and when it is told that every buffer is held.
#include "loader/device/staged_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "stoker/error.h"

namespace stoker::detail {
namespace {

using namespace std::chrono_literals;
using Item = StagedQueue::Item;

const auto every_buffer_held = [] { return true; };

// The staging thread has made its batch (so every buffer counts as held) but not yet queued it:
// the batch is coming, so the training loop waits for it instead of being told to let go.
TEST(StagedQueue, ABatchBeingStagedIsWaitedForEvenWhenItsBufferCountsAsHeld) {
  StagedQueue queue(1);
  std::deque<Item> stale;
  const std::uint64_t generation = queue.request(0, 0, 0, stale);
  ASSERT_EQ(queue.next_work([] { return true; }).kind, StagedQueue::Work::start_epoch);
  queue.started(generation, nullptr);
  ASSERT_EQ(queue.next_work([] { return true; }).kind, StagedQueue::Work::stage);

  EXPECT_FALSE(queue.wait_ready(generation, every_buffer_held, std::chrono::steady_clock::now() + 20ms));
  auto popped = std::async(std::launch::async, [&] {
    std::deque<Item> popped_stale;
    return queue.pop(generation, 2, every_buffer_held, popped_stale);
  });
  std::deque<Item> abandoned;
  queue.push(Item{generation, std::nullopt, nullptr, true}, abandoned);
  std::optional<Item> item = popped.get();
  ASSERT_TRUE(item);
  EXPECT_TRUE(item->end);
  EXPECT_TRUE(abandoned.empty());
}

// Nothing queued, nothing being staged, every buffer held by the user: waiting would be forever.
TEST(StagedQueue, EveryBufferHeldWithNothingBeingStagedIsTheHeldError) {
  StagedQueue queue(1);
  std::deque<Item> stale;
  const std::uint64_t generation = queue.request(0, 0, 0, stale);
  ASSERT_EQ(queue.next_work([] { return true; }).kind, StagedQueue::Work::start_epoch);
  queue.started(generation, nullptr);

  EXPECT_TRUE(queue.wait_ready(generation, every_buffer_held, std::chrono::steady_clock::now() + 10s));
  try {
    queue.pop(generation, 2, every_buffer_held, stale);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::slots_held) << e.what();
    EXPECT_NE(std::string(e.what()).find("all 2 device buffers are held"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stoker::detail
