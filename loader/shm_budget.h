// How much shared memory a loader may reserve. The budget is the smallest of: shm_fraction of the
// free space statvfs reports for the shm directory; the memory cgroup's headroom (tmpfs pages count
// against it and statvfs cannot see it); Options::shm_budget. It is divided by LOCAL_WORLD_SIZE when
// that is set, since every local rank runs a loader.
#pragma once

#include <cstdint>
#include <string>

namespace stoker::detail {

struct ShmBudget {
  std::uint64_t bytes = 0;
  std::uint64_t shm_free = 0;  // free bytes in the shm directory
  std::string reason;          // which bound applies, in words: "50% of 1.0 GiB free in /dev/shm"
};

struct ShmEnvironment {
  std::string shm_dir = "/dev/shm";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string proc_cgroup = "/proc/self/cgroup";
};

// The memory cgroup's headroom (limit - usage) over this process's cgroup and its ancestors,
// cgroup v2 or v1; UINT64_MAX when no limit is set or none can be read.
std::uint64_t cgroup_memory_headroom(const ShmEnvironment& env);

ShmBudget compute_shm_budget(double fraction, std::uint64_t explicit_bytes, const ShmEnvironment& env = {});

}  // namespace stoker::detail
