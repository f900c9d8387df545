#include "loader/producers/task_table.h"

#include <gtest/gtest.h>

namespace stoker::detail {
namespace {

TEST(TaskTable, IssuesInOrderWithinTheWindowToTheLeastLoadedWorker) {
  TaskTable t(/*depth=*/4, /*num_workers=*/3);
  t.start(0, 10);
  std::vector<std::uint32_t> workers;
  while (t.can_issue()) {
    std::uint32_t w = t.least_loaded_worker();
    workers.push_back(w);
    EXPECT_EQ(t.issue(/*slot=*/100 + static_cast<std::uint32_t>(workers.size()), w), workers.size() - 1);
  }
  EXPECT_EQ(workers, (std::vector<std::uint32_t>{0, 1, 2, 0}));  // the window holds 4
  EXPECT_EQ(t.in_flight(), 4u);
  EXPECT_EQ(t.outstanding(0), 2u);
  EXPECT_EQ(t.outstanding(1), 1u);
  EXPECT_EQ(t.at(3).slot, 104u);
}

TEST(TaskTable, ReceivesInIssueOrderWhateverTheArrivalOrder) {
  TaskTable t(3, 2);
  t.start(0, 5);
  for (std::uint32_t s = 0; t.can_issue(); ++s) t.issue(s, t.least_loaded_worker());
  EXPECT_TRUE(t.mark_arrived(2));
  EXPECT_TRUE(t.mark_arrived(1));
  EXPECT_FALSE(t.at(0).arrived);
  EXPECT_TRUE(t.mark_arrived(0));
  EXPECT_EQ(t.receive().slot, 0u);
  EXPECT_EQ(t.next_to_receive(), 1u);
  EXPECT_TRUE(t.can_issue());
  EXPECT_EQ(t.issue(7, t.least_loaded_worker()), 3u);
  EXPECT_EQ(t.at(3).slot, 7u);  // reuses entry 0
  EXPECT_EQ(t.receive().slot, 1u);
  EXPECT_EQ(t.receive().slot, 2u);
  EXPECT_EQ(t.issue(8, 0), 4u);
  EXPECT_FALSE(t.can_issue());  // the epoch has no more
  t.mark_arrived(3);
  t.mark_arrived(4);
  t.receive();
  t.receive();
  EXPECT_TRUE(t.finished());
  EXPECT_EQ(t.outstanding(0) + t.outstanding(1), 0u);
}

TEST(TaskTable, ArrivedBatchesAreNotLoad) {
  TaskTable t(4, 2);
  t.start(0, 10);
  for (std::uint32_t s = 0; t.can_issue(); ++s) t.issue(s, t.least_loaded_worker());  // workers 0, 1, 0, 1
  // Worker 1 is ahead: batches 1 and 3 arrived, and wait behind batch 0.
  t.mark_arrived(1);
  t.mark_arrived(3);
  t.mark_arrived(0);
  t.receive();
  EXPECT_EQ(t.outstanding(0), 1u);
  EXPECT_EQ(t.outstanding(1), 2u);
  EXPECT_EQ(t.unfinished(0), 1u);
  EXPECT_EQ(t.unfinished(1), 0u);
  EXPECT_EQ(t.least_loaded_worker(), 1u);  // idle, though two of its batches are in the window
  t.issue(4, 1);
  EXPECT_EQ(t.unfinished(1), 1u);
  EXPECT_FALSE(t.mark_arrived(0));  // received already: no change
  t.mark_arrived(1);                // a repeated report counts once
  EXPECT_EQ(t.unfinished(1), 1u);
}

TEST(TaskTable, WorkersWithEqualWorkLeftTakeTurns) {
  TaskTable t(8, 3);
  t.start(0, 100);
  std::vector<std::uint32_t> workers;
  for (std::uint32_t s = 0; s < 6; ++s) {
    const std::uint32_t w = t.least_loaded_worker();
    workers.push_back(w);
    t.issue(s, w);
    t.mark_arrived(s);  // each finishes at once: every choice is a tie
    t.receive();
  }
  EXPECT_EQ(workers, (std::vector<std::uint32_t>{0, 1, 2, 0, 1, 2}));
}

TEST(TaskTable, StaleArrivalsAreRejected) {
  TaskTable t(2, 1);
  t.start(5, 9);                    // a resumed epoch starts mid-way
  EXPECT_FALSE(t.mark_arrived(5));  // not issued yet
  t.issue(0, 0);
  EXPECT_FALSE(t.mark_arrived(4));  // before the window
  EXPECT_TRUE(t.mark_arrived(5));
  t.receive();
  EXPECT_FALSE(t.mark_arrived(5));  // already received
}

TEST(TaskTable, PendingOfNamesTheFirstUndeliveredBatchOfAWorker) {
  TaskTable t(4, 2);
  t.start(0, 4);
  t.issue(0, 0);
  t.issue(1, 1);
  t.issue(2, 0);
  t.issue(3, 1);
  t.mark_arrived(0);
  EXPECT_EQ(t.pending_of(0), 2u);
  EXPECT_EQ(t.pending_of(1), 1u);
  t.mark_arrived(2);
  EXPECT_EQ(t.pending_of(0), std::nullopt);
}

}  // namespace
}  // namespace stoker::detail

namespace stoker::detail {
namespace {

TEST(TaskTable, AffinityKeepsARunOfBatchesOnOneWorkerWithinItsShare) {
  TaskTable t(8, 2);  // each worker's share of the window: 4
  t.set_affinity_span(4);
  t.start(0, 16);
  std::vector<std::uint32_t> workers;
  for (std::uint32_t s = 0; t.can_issue(); ++s) {
    const std::uint32_t w = t.worker_for_next();
    workers.push_back(w);
    t.issue(s, w);
  }
  // Batches 0-3 share data (one quasi-random window), 4-7 the next.
  EXPECT_EQ(workers, (std::vector<std::uint32_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  // A worker past its share hands the rest of its run to the least loaded.
  TaskTable u(4, 2);
  u.set_affinity_span(4);
  u.start(0, 16);
  workers.clear();
  for (std::uint32_t s = 0; u.can_issue(); ++s) {
    const std::uint32_t w = u.worker_for_next();
    workers.push_back(w);
    u.issue(s, w);
  }
  EXPECT_EQ(workers, (std::vector<std::uint32_t>{0, 0, 1, 1}));
}

}  // namespace
}  // namespace stoker::detail
