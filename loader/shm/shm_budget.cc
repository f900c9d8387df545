#include "loader/shm/shm_budget.h"

#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "base/posix_error.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

constexpr std::uint64_t kUnlimited = std::numeric_limits<std::uint64_t>::max();

// A number from a one-line cgroup file; kUnlimited for "max", a v1 "no limit" value or no file.
std::uint64_t read_cgroup_number(const std::string& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return kUnlimited;
  std::uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc()) return kUnlimited;
  return v >= (1ULL << 60) ? kUnlimited : v;  // v1 reports "unlimited" as ~2^63
}

// The cgroup's inactive file pages (memory.stat: "inactive_file" in v2, "total_inactive_file" in
// v1; 0 without the file): page cache the kernel reclaims before it would charge the limit, which
// the usage counts all the same. A job that streams a dataset larger than its limit keeps its usage
// near the limit with them; shared memory and memfd pages are never among them.
std::uint64_t reclaimable_of(const std::string& dir) {
  std::ifstream in(dir + "/memory.stat");
  std::string key;
  std::uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "inactive_file" || key == "total_inactive_file") return value;
  }
  return 0;
}

std::uint64_t headroom_of(const std::string& dir, const char* limit_file, const char* usage_file) {
  std::uint64_t limit = read_cgroup_number(dir + "/" + limit_file);
  if (limit == kUnlimited) return kUnlimited;
  std::uint64_t usage = read_cgroup_number(dir + "/" + usage_file);
  if (usage == kUnlimited) return kUnlimited;
  usage -= std::min(usage, reclaimable_of(dir));
  return limit > usage ? limit - usage : 0;
}

// Headroom along `path` and its ancestors below `root`.
std::uint64_t headroom_along(const std::string& root, std::string path, const char* limit_file,
                             const char* usage_file) {
  std::uint64_t best = kUnlimited;
  for (;;) {
    best = std::min(best, headroom_of(root + path, limit_file, usage_file));
    if (path.empty() || path == "/") break;
    auto slash = path.find_last_of('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  return best;
}

}  // namespace

std::uint64_t cgroup_memory_headroom(const ShmEnvironment& env) {
  std::ifstream in(env.proc_cgroup);
  std::string line;
  std::uint64_t best = kUnlimited;
  while (std::getline(in, line)) {
    // "hierarchy-ID:controller-list:path"
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      best = std::min(best, headroom_along(env.cgroup_root, path, "memory.max", "memory.current"));
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      // In a container the listed path is often the host's; the mounted hierarchy starts at its root.
      std::string root = env.cgroup_root + "/memory";
      best = std::min({best, headroom_along(root, path, "memory.limit_in_bytes", "memory.usage_in_bytes"),
                       headroom_of(root, "memory.limit_in_bytes", "memory.usage_in_bytes")});
    }
  }
  return best;
}

std::uint64_t mem_available(const ShmEnvironment& env) {
  std::ifstream in(env.meminfo);
  std::string key, unit;
  std::uint64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return kUnlimited;
}

ShmBudget compute_shm_budget(double fraction, std::uint64_t explicit_bytes, std::uint32_t local_ranks,
                             const ShmEnvironment& env) {
  struct statvfs vfs;
  if (::statvfs(env.shm_dir.c_str(), &vfs) != 0) throw_errno(env.shm_dir + ": statvfs");
  ShmBudget b;
  b.shm_free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  b.bytes = static_cast<std::uint64_t>(static_cast<double>(b.shm_free) * fraction);
  b.reason = fmt::format("{:.0f}% of {} free in {}", fraction * 100, format_bytes(b.shm_free), env.shm_dir);
  std::uint64_t cg = cgroup_memory_headroom(env);
  if (cg < b.bytes) {
    b.bytes = cg;
    b.reason = fmt::format("the memory cgroup's headroom of {}", format_bytes(cg));
    b.bound = BudgetBound::cgroup;
  }
  if (explicit_bytes) {
    // An explicit budget replaces the default fraction (a user may give the ring more than half of
    // /dev/shm), but never more than is free or than the cgroup allows.
    const std::uint64_t cap = std::min(b.shm_free, cg);
    if (explicit_bytes <= cap) {
      b.bytes = explicit_bytes;
      b.reason = fmt::format("the shm budget option of {}", format_bytes(explicit_bytes));
      b.bound = BudgetBound::option;
    } else {
      b.bytes = cap;
      b.bound = cap == cg ? BudgetBound::cgroup : BudgetBound::shm_space;
      b.reason = fmt::format("the shm budget option of {}, capped by {}", format_bytes(explicit_bytes),
                             cap == cg ? fmt::format("the memory cgroup's headroom of {}", format_bytes(cg))
                                       : fmt::format("the {} free in {}", format_bytes(b.shm_free), env.shm_dir));
    }
  }
  // Memory outside /dev/shm: the cgroup's headroom or MemAvailable, whichever is smaller.
  const std::uint64_t avail = mem_available(env);
  b.memory_available = std::min(cg, avail);
  if (b.memory_available == kUnlimited) {
    b.memory_bytes = 0;  // nothing known: do not move the ring out of /dev/shm
    b.memory_reason = "available memory unknown (no /proc/meminfo)";
    b.memory_bound = BudgetBound::unknown;
  } else {
    b.memory_bytes = static_cast<std::uint64_t>(static_cast<double>(b.memory_available) * fraction);
    b.memory_reason =
        fmt::format("{:.0f}% of {} of available memory ({})", fraction * 100, format_bytes(b.memory_available),
                    cg <= avail ? "the memory cgroup's headroom" : "MemAvailable");
    b.memory_bound = cg <= avail ? BudgetBound::cgroup : BudgetBound::available_memory;
    if (explicit_bytes) {
      b.memory_bytes = std::min(explicit_bytes, b.memory_available);
      if (explicit_bytes <= b.memory_available) b.memory_bound = BudgetBound::option;
      b.memory_reason =
          fmt::format("the shm budget option of {}{}", format_bytes(explicit_bytes),
                      explicit_bytes > b.memory_available
                          ? fmt::format(", capped by {} of available memory", format_bytes(b.memory_available))
                          : "");
    }
  }
  if (const std::uint32_t n = local_ranks; n > 1) {
    b.bytes /= n;
    b.reason += fmt::format(", shared by {} local ranks", n);
    b.memory_bytes /= n;
    b.memory_reason += fmt::format(", shared by {} local ranks", n);
  }
  return b;
}

}  // namespace stoker::detail
