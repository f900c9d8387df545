// StagedQueue: when the training loop waits and when it is told that every buffer is held.
#include "loader/device/staged_queue.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

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
  // Most often pop() is waiting by now; when it is not, it finds the item queued, and the
  // wait_ready above has already shown that nothing is thrown meanwhile.
  std::this_thread::sleep_for(50ms);
  std::deque<Item> abandoned;
  queue.push(Item{generation, std::nullopt, nullptr, true}, abandoned);
  std::optional<Item> item = popped.get();
  ASSERT_TRUE(item);
  EXPECT_TRUE(item->end);
  EXPECT_TRUE(abandoned.empty());
}

// A new epoch was asked for while a batch of the old one was being staged: that batch is given
// back, not queued, and its buffer counts as held until the staging thread has released it.
TEST(StagedQueue, AnAbandonedBatchIsBeingStagedUntilItsBufferIsReleased) {
  StagedQueue queue(1);
  std::deque<Item> stale;
  const std::uint64_t old_generation = queue.request(0, 0, 0, stale);
  ASSERT_EQ(queue.next_work([] { return true; }).kind, StagedQueue::Work::start_epoch);
  queue.started(old_generation, nullptr);
  ASSERT_EQ(queue.next_work([] { return true; }).kind, StagedQueue::Work::stage);
  const std::uint64_t generation = queue.request(1, 0, 0, stale);

  std::deque<Item> abandoned;
  queue.push(Item{old_generation, std::nullopt, nullptr, true}, abandoned);
  ASSERT_EQ(abandoned.size(), 1u);
  EXPECT_FALSE(queue.wait_ready(generation, every_buffer_held, std::chrono::steady_clock::now() + 20ms));
  abandoned.clear();
  queue.abandoned_released();
  EXPECT_TRUE(queue.wait_ready(generation, every_buffer_held, std::chrono::steady_clock::now() + 10s));
  EXPECT_THROW(queue.pop(generation, 2, every_buffer_held, stale), Error);
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
