// How much shared memory a loader may reserve. The budget is the smallest of: shm_fraction of the
// free space statvfs reports for the shm directory; the memory cgroup's headroom (tmpfs pages count
// against it and statvfs cannot see it); Options::shm_budget. It is divided by the number of ranks on
// this node (the caller asks the launcher: loader/plan/launcher_env.h), since every local rank runs a loader.
#pragma once

#include <cstdint>
#include <string>

namespace stoker::detail {

// What sets a budget: a refusal's advice is to raise that.
enum class BudgetBound {
  shm_space,         // the free space of the shm directory (a container's --shm-size)
  cgroup,            // the memory cgroup's headroom (a container's memory limit)
  option,            // Options::shm_budget
  available_memory,  // MemAvailable
  unknown,
};

struct ShmBudget {
  // /dev/shm (the shm directory): what a segment there may take.
  std::uint64_t bytes = 0;
  std::uint64_t shm_free = 0;  // free bytes in the shm directory
  std::string reason;          // which bound applies, in words: "50% of 1.0 GiB free in /dev/shm"
  BudgetBound bound = BudgetBound::shm_space;
  // Memory not counted against /dev/shm (memfd_create): shm_fraction of the smaller of the memory
  // cgroup's headroom and MemAvailable, or the explicit option; divided among local ranks too.
  std::uint64_t memory_bytes = 0;
  std::uint64_t memory_available = 0;  // the smaller of MemAvailable and the cgroup's headroom
  std::string memory_reason;
  BudgetBound memory_bound = BudgetBound::available_memory;
};

struct ShmEnvironment {
  std::string shm_dir = "/dev/shm";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string proc_cgroup = "/proc/self/cgroup";
  std::string meminfo = "/proc/meminfo";
};

// MemAvailable from /proc/meminfo, in bytes; UINT64_MAX when it cannot be read.
std::uint64_t mem_available(const ShmEnvironment& env);

// The memory cgroup's headroom (limit - usage, the inactive page cache not counted as usage: the
// kernel reclaims it first) over this process's cgroup and its ancestors,
// cgroup v2 or v1; UINT64_MAX when no limit is set or none can be read.
std::uint64_t cgroup_memory_headroom(const ShmEnvironment& env);

// `local_ranks`: the loaders on this node that share its memory (1 or more).
ShmBudget compute_shm_budget(double fraction, std::uint64_t explicit_bytes, std::uint32_t local_ranks,
                             const ShmEnvironment& env = {});

}  // namespace stoker::detail
