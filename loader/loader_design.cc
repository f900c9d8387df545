#include "loader/loader_design.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "base/option_spelling.h"
#include "loader/plan/quasi_random.h"
#include "stoker/error.h"

namespace stoker::detail {

LoaderDesign design_loader(const Options& o, unsigned cpus) {
  LoaderDesign d;
  d.order = o.shuffle && o.order == Order::sequential ? Order::random : o.order;
  d.reader_options.format = o.format;
  d.reader_options.fields = o.fields;
  d.reader_options.group = o.group;
  d.reader_options.sequential = d.order == Order::sequential;
  d.reader_options.max_open_shards = o.max_open_shards;
  d.reader_options.lmdb_keys = o.lmdb_keys;
  d.reader_options.lmdb_count_key = o.lmdb_count_key;
  d.auto_workers = o.num_workers == kAuto;
  d.auto_prefetch = o.prefetch == kAuto;
  // kAuto forks a worker per CPU this process may use (not per core of the machine: a container
  // given 2 of 64 would fork 16 to share 2) and reserves the deepest ring the tuner may use; the
  // tuner then activates what helps.
  const std::uint32_t most = std::clamp<std::uint32_t>(cpus, 1, 16);
  d.num_workers = d.auto_workers ? most : static_cast<std::uint32_t>(o.num_workers);
  d.prefetch = d.auto_prefetch ? kAutoMaxPrefetch : static_cast<std::uint32_t>(o.prefetch);
  d.held_slots = o.device.staged() ? 0 : static_cast<std::uint32_t>(o.held_batches);
  return d;
}

std::uint64_t affinity_span(const LoaderDesign& d, std::uint64_t group, std::uint32_t world_size,
                            std::size_t batch_size) {
  if (d.order != Order::quasi_random) return 0;
  // A window of the global order is spread over the ranks: this rank's batches of one window.
  const std::uint64_t window = group * kQuasiRandomWindowGroups / std::max<std::uint32_t>(world_size, 1);
  return std::max<std::uint64_t>(1, window / batch_size);
}

std::optional<AutoTuner::Limits> tuner_limits(const LoaderDesign& d, std::uint32_t depth, std::size_t slot_bytes,
                                              std::size_t cache_bytes) {
  if (!d.auto_workers && !d.auto_prefetch) return std::nullopt;
  AutoTuner::Limits limits;
  limits.max_workers = d.num_workers;
  limits.max_depth = depth - d.held_slots;  // the ring holds at least num_workers more (RingRequest::least)
  limits.tune_workers = d.auto_workers;
  limits.tune_prefetch = d.auto_prefetch;
  limits.start_workers = d.auto_workers ? 1 : d.num_workers;
  limits.start_prefetch = d.auto_prefetch ? 2 : d.prefetch;
  if (slot_bytes > 0) {
    // The batches the loop holds rotate through the cache too.
    const std::size_t fit = std::min<std::size_t>(cache_bytes / 2 / slot_bytes, depth);
    limits.cached_depth = static_cast<std::uint32_t>(fit > d.held_slots ? fit - d.held_slots : 0);
  }
  return limits;
}

std::size_t cache_bytes_in(const std::string& cache_dir) {
  std::size_t bytes = 0;
  int deepest = 0;
  for (int index = 0; index < 16; ++index) {
    const std::string dir = fmt::format("{}/index{}/", cache_dir, index);
    std::ifstream level_file(dir + "level"), type_file(dir + "type"), size_file(dir + "size");
    int level = 0;
    std::string type, size;
    if (!(level_file >> level) || !(type_file >> type) || !(size_file >> size)) continue;
    // A level 4 is a memory-side cache (eDRAM), not the one the CPU's cores share.
    if (type == "Instruction" || level < deepest || level > 3) continue;
    std::size_t used = 0;
    unsigned long long value = 0;
    try {
      value = std::stoull(size, &used);
    } catch (const std::exception&) {
      continue;
    }
    const std::string unit = size.substr(used);  // sysfs writes "32768K"
    const unsigned long long scale = unit == "K" ? 1ULL << 10 : unit == "M" ? 1ULL << 20 : unit == "G" ? 1ULL << 30 : 1;
    if (value > (1ULL << 40) / scale) continue;  // no cache holds a TiB
    deepest = level;
    bytes = static_cast<std::size_t>(value * scale);
  }
  return bytes;
}

std::size_t last_level_cache_bytes() {
  // sysfs, not sysconf(_SC_LEVEL3_CACHE_SIZE): in a VM on an AMD EPYC glibc said 384 MiB of the
  // host's where the CPU's own cache holds 32. The first CPU this process may run on: CPUs of one
  // machine may have caches of different sizes.
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpu = 0;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &set)) ++cpu;
  }
  return cache_bytes_in(fmt::format("/sys/devices/system/cpu/cpu{}/cache", cpu));
}

void check_fields_fit_device(const Schema& delivered, const Options& o) {
  if (!o.device.staged() || !delivered.has_bytes_fields()) return;
  std::vector<std::string> names;
  for (const auto& f : delivered.fields) {
    if (f.is_bytes()) names.push_back(f.name);
  }
  throw Error(ErrorCode::invalid_option,
              fmt::format("{}: field(s) {} are variable-length bytes, which stoker delivers on the CPU only: decode "
                          "them in the workers with a pipeline ({}) or use {}",
                          o.source, fmt::join(names, ", "), option_name("pipeline"),
                          option_setting("device", "Device::cpu()", "cpu")));
}

namespace {

// CPUs from a quota of `quota` microseconds of CPU time per `period`, rounded up: 0 for none. A
// quota of more CPUs than any machine has (cgroup files allow 2^44 microseconds) is as good as none.
unsigned cpus_of_quota(double quota, double period) {
  if (!std::isfinite(quota) || !std::isfinite(period) || !(quota > 0) || !(period > 0)) return 0;
  const double cpus = std::ceil(quota / period);
  return cpus > 65536 ? 0 : static_cast<unsigned>(std::max(1.0, cpus));
}

// The tighter of two CPU limits, 0 being none.
unsigned tighter(unsigned a, unsigned b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); }

// cgroup v2's cpu.max in `dir`: "QUOTA PERIOD", or "max PERIOD" for none.
unsigned v2_quota_in(const std::string& dir) {
  std::ifstream in(dir + "/cpu.max");
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max") return 0;
  try {
    return cpus_of_quota(std::stod(quota), period);
  } catch (const std::exception&) {  // not a number: no quota known
    return 0;
  }
}

// cgroup v1's cpu controller in `dir`: cpu.cfs_quota_us (-1 for none) per cpu.cfs_period_us.
unsigned v1_quota_in(const std::string& dir) {
  std::ifstream quota_file(dir + "/cpu.cfs_quota_us"), period_file(dir + "/cpu.cfs_period_us");
  double quota = 0, period = 0;
  if (!(quota_file >> quota) || !(period_file >> period)) return 0;
  return cpus_of_quota(quota, period);
}

// The smallest quota `read` finds in `mount` + `path` and each folder above it up to `mount`.
template <class Read>
unsigned smallest_quota_up(const std::string& mount, std::string path, Read read) {
  unsigned least = 0;
  for (;;) {
    while (!path.empty() && path.back() == '/') path.pop_back();
    least = tighter(least, read(mount + path));
    const std::size_t slash = path.find_last_of('/');
    if (path.empty() || slash == std::string::npos) return least;
    path.resize(slash);
  }
}

}  // namespace

unsigned cgroup_cpu_quota(const std::string& root, const std::string& self_cgroup) {
  unsigned least = 0;
  std::istringstream lines(self_cgroup);
  std::string line;
  bool named = false;
  while (std::getline(lines, line)) {
    // "ID:CONTROLLERS:PATH": v2's is "0::PATH"; v1's cpu controller is listed in CONTROLLERS.
    const std::size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      least = tighter(least, smallest_quota_up(root, path, v2_quota_in));
      named = true;
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {
      for (const std::string& mount : {root + "/" + controllers, root + "/cpu"}) {
        least = tighter(least, smallest_quota_up(mount, path, v1_quota_in));
      }
      named = true;
    }
  }
  if (!named) {  // no /proc/self/cgroup: the hierarchy's root is the process's (a container's)
    least = tighter(tighter(v2_quota_in(root), v1_quota_in(root + "/cpu")), v1_quota_in(root + "/cpu,cpuacct"));
  }
  return least;
}

unsigned usable_cpus() {
  unsigned cpus = 0;
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) cpus = static_cast<unsigned>(CPU_COUNT(&set));
  std::ifstream self("/proc/self/cgroup");
  const std::string cgroups{std::istreambuf_iterator<char>(self), std::istreambuf_iterator<char>()};
  return tighter(cpus, cgroup_cpu_quota("/sys/fs/cgroup", cgroups));
}

std::string oversubscription_warning(std::size_t num_workers, unsigned cpus) {
  if (cpus == 0 || num_workers <= 2 * std::size_t{cpus}) return "";
  return fmt::format(
      "{} workers are more than twice the {} CPU{} this process may run on: they take turns on them, each batch "
      "waiting its turn, and each costs memory; {} or fewer load as fast",
      num_workers, cpus, cpus == 1 ? "" : "s", 2 * std::size_t{cpus});
}

std::string oversubscription_warning_once(std::size_t num_workers, std::atomic<bool>& said) {
  std::string w = oversubscription_warning(num_workers, usable_cpus());
  if (w.empty() || said.exchange(true)) return "";
  return w;
}

std::string oversubscription_warning_once(std::size_t num_workers) {
  static std::atomic<bool> said{false};
  return oversubscription_warning_once(num_workers, said);
}

}  // namespace stoker::detail
