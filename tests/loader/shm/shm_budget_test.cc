#include "loader/shm/shm_budget.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class ShmBudget : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.shm_dir = tmp_.dir().string();  // a real filesystem with plenty free
    env_.cgroup_root = (tmp_.dir() / "cgroup").string();
    env_.proc_cgroup = (tmp_.dir() / "proc-self-cgroup").string();
  }
  TempDir tmp_;
  detail::ShmEnvironment env_;
};

TEST_F(ShmBudget, TheMemoryCgroupV2HeadroomBoundsItAlongTheAncestors) {
  write_file(env_.proc_cgroup, "0::/job/step\n");
  write_file(fs::path(env_.cgroup_root) / "job/step/memory.max", "max\n");
  write_file(fs::path(env_.cgroup_root) / "job/step/memory.current", "1000\n");
  write_file(fs::path(env_.cgroup_root) / "job/memory.max", "104857600\n");     // 100 MiB
  write_file(fs::path(env_.cgroup_root) / "job/memory.current", "41943040\n");  // 40 MiB
  EXPECT_EQ(detail::cgroup_memory_headroom(env_), 60u << 20);
  auto b = detail::compute_shm_budget(0.5, 0, 1, env_);
  EXPECT_EQ(b.bytes, 60u << 20);
  EXPECT_THAT(b.reason, HasSubstr("memory cgroup's headroom of 60.0 MiB"));
  EXPECT_EQ(b.bound, detail::BudgetBound::cgroup);  // a refusal asks for a larger memory limit
  // memfd memory too: 60 MiB is less than this machine's MemAvailable.
  EXPECT_EQ(b.memory_available, 60u << 20);
  EXPECT_EQ(b.memory_bound, detail::BudgetBound::cgroup);
  b = detail::compute_shm_budget(0.5, 32u << 20, 1, env_);
  EXPECT_EQ(b.memory_bound, detail::BudgetBound::option);
  b = detail::compute_shm_budget(0.5, 128u << 20, 1, env_);  // more than the headroom: capped by it
  EXPECT_EQ(b.memory_bound, detail::BudgetBound::cgroup);
  EXPECT_EQ(b.bound, detail::BudgetBound::cgroup);
}

// A job that has read more of its dataset than its limit holds keeps its usage near the limit with
// page cache, which the kernel reclaims first: the inactive file pages are not counted as used.
TEST_F(ShmBudget, TheInactivePageCacheIsNotCountedAgainstTheCgroupLimit) {
  write_file(env_.proc_cgroup, "0::/job\n");
  write_file(fs::path(env_.cgroup_root) / "job/memory.max", "104857600\n");      // 100 MiB
  write_file(fs::path(env_.cgroup_root) / "job/memory.current", "103809024\n");  // 99 MiB
  EXPECT_EQ(detail::cgroup_memory_headroom(env_), 1u << 20);
  write_file(fs::path(env_.cgroup_root) / "job/memory.stat",
             "anon 20971520\nfile 80740352\nshmem 4194304\ninactive_anon 0\nactive_anon 20971520\n"
             "inactive_file 73400320\nactive_file 7340032\n");  // 70 MiB of inactive page cache
  EXPECT_EQ(detail::cgroup_memory_headroom(env_), 71u << 20);
  // v1 names it total_inactive_file, and counts it the same way.
  write_file(env_.proc_cgroup, "4:memory:/\n");
  write_file(fs::path(env_.cgroup_root) / "memory/memory.limit_in_bytes", "104857600\n");
  write_file(fs::path(env_.cgroup_root) / "memory/memory.usage_in_bytes", "103809024\n");
  write_file(fs::path(env_.cgroup_root) / "memory/memory.stat", "cache 80740352\ntotal_inactive_file 73400320\n");
  EXPECT_EQ(detail::cgroup_memory_headroom(env_), 71u << 20);
}

TEST_F(ShmBudget, TheMemoryCgroupV1LimitCountsAndUnlimitedDoesNot) {
  write_file(env_.proc_cgroup, "4:memory:/host/path/not/mounted\n3:cpu:/x\n");
  write_file(fs::path(env_.cgroup_root) / "memory/memory.limit_in_bytes", "9223372036854771712\n");
  write_file(fs::path(env_.cgroup_root) / "memory/memory.usage_in_bytes", "5000\n");
  EXPECT_EQ(detail::cgroup_memory_headroom(env_), UINT64_MAX);
  write_file(fs::path(env_.cgroup_root) / "memory/memory.limit_in_bytes", "2147483648\n");
  write_file(fs::path(env_.cgroup_root) / "memory/memory.usage_in_bytes", "1073741824\n");
  EXPECT_EQ(detail::cgroup_memory_headroom(env_), 1u << 30);
}

TEST_F(ShmBudget, TheOptionAndTheLocalRanksLowerIt) {
  write_file(env_.proc_cgroup, "0::/\n");
  auto b = detail::compute_shm_budget(0.5, 64u << 20, 1, env_);
  EXPECT_EQ(b.bytes, 64u << 20);
  EXPECT_THAT(b.reason, HasSubstr("shm budget option"));
  EXPECT_EQ(b.bound, detail::BudgetBound::option);
  b = detail::compute_shm_budget(0.5, 64u << 20, 4, env_);
  EXPECT_EQ(b.bytes, 16u << 20);
  EXPECT_THAT(b.reason, HasSubstr("shared by 4 local ranks"));
  EXPECT_EQ(b.memory_bytes, 16u << 20);
  EXPECT_THAT(b.memory_reason, HasSubstr("shared by 4 local ranks"));
}

TEST_F(ShmBudget, AnExplicitBudgetMayExceedTheFractionButNotTheFreeSpace) {
  write_file(env_.proc_cgroup, "0::/\n");
  auto free_space = detail::compute_shm_budget(0.5, 0, 1, env_).shm_free;
  ASSERT_GT(free_space, 16u << 20);
  const std::uint64_t most = free_space / 10 * 9;  // above the default half
  auto b = detail::compute_shm_budget(0.5, most, 1, env_);
  EXPECT_EQ(b.bytes, most);
  EXPECT_THAT(b.reason, HasSubstr("shm budget option"));
  b = detail::compute_shm_budget(0.5, free_space * 4, 1, env_);
  EXPECT_LE(b.bytes, free_space + (16u << 20));  // the free space may move a little between calls
  EXPECT_GE(b.bytes, free_space / 2);
  EXPECT_THAT(b.reason, HasSubstr("capped by the"));
  EXPECT_EQ(b.bound, detail::BudgetBound::shm_space);  // the cap, not the option, holds it back
}

TEST_F(ShmBudget, WithoutLimitsItIsTheFractionOfTheFreeSpace) {
  write_file(env_.proc_cgroup, "0::/\n");
  auto b = detail::compute_shm_budget(0.25, 0, 1, env_);
  EXPECT_GT(b.shm_free, 0u);
  EXPECT_NEAR(static_cast<double>(b.bytes), 0.25 * static_cast<double>(b.shm_free), 1 << 20);
  EXPECT_THAT(b.reason, HasSubstr("25% of"));
  EXPECT_EQ(b.bound, detail::BudgetBound::shm_space);
}

}  // namespace
}  // namespace stoker::test
