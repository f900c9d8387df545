#include "loader/plan/launcher_env.h"

#include <fmt/format.h>

#include <charconv>
#include <string_view>
#include <vector>

#include "stoker/error.h"

namespace stoker::detail {
namespace {

std::optional<std::uint32_t> number(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  if (!v) return std::nullopt;
  std::string_view s(v);
  std::uint32_t n = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("launcher environment: {}='{}' is not a non-negative integer", name, s));
  }
  return n;
}

// SLURM_TASKS_PER_NODE is "2(x3),1": 2 tasks on each of 3 nodes, then 1; the entry for node
// SLURM_NODEID.
std::optional<std::uint32_t> slurm_tasks_on_node(const EnvLookup& env) {
  const char* spec = env("SLURM_TASKS_PER_NODE");
  auto node = number(env, "SLURM_NODEID");
  if (!spec || !node) return std::nullopt;
  std::string_view s(spec);
  std::uint32_t first_node = 0;
  while (!s.empty()) {
    std::string_view item = s.substr(0, s.find(','));
    s = item.size() < s.size() ? s.substr(item.size() + 1) : std::string_view{};
    std::uint32_t tasks = 0, repeat = 1;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), tasks);
    std::string_view rest(p, static_cast<std::size_t>(item.data() + item.size() - p));
    bool ok = ec == std::errc();
    if (ok && !rest.empty()) {
      ok = rest.size() > 3 && rest.substr(0, 2) == "(x" && rest.back() == ')';
      if (ok) {
        auto [q, ec2] = std::from_chars(rest.data() + 2, rest.data() + rest.size() - 1, repeat);
        ok = ec2 == std::errc() && q == rest.data() + rest.size() - 1;
      }
    }
    if (!ok)
      throw Error(ErrorCode::invalid_option,
                  fmt::format("launcher environment: SLURM_TASKS_PER_NODE='{}' is malformed", spec));
    if (*node < first_node + repeat) return tasks;
    first_node += repeat;
  }
  throw Error(ErrorCode::invalid_option,
              fmt::format("launcher environment: SLURM_NODEID={} is past SLURM_TASKS_PER_NODE='{}'", *node, spec));
}

struct Family {
  const char* name;
  const char* rank_var;
  const char* size_var;
  const char* local_var;  // may be null
};

constexpr Family kFamilies[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"},
    {"SLURM", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE"},
};

// PyTorch Lightning's own launcher (a Trainer's devices > 1 outside torchrun) sets WORLD_SIZE,
// LOCAL_RANK and NODE_RANK, and no RANK. On node 0 the global rank is the local one; on another
// node it depends on the processes per node, which no variable gives (an error: the budget then
// assumes one rank, with a warning). At most WORLD_SIZE ranks share node 0: a budget divided by
// it never over-commits there.
LaunchInfo lightning_launch(const EnvLookup& env, std::uint32_t size) {
  const std::uint32_t local_rank = *number(env, "LOCAL_RANK");
  const std::uint32_t node = number(env, "NODE_RANK").value_or(0);
  if (size == 0 || local_rank >= size) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("launcher environment: LOCAL_RANK={} is not below WORLD_SIZE={}", local_rank, size));
  }
  if (node != 0) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("launcher environment: WORLD_SIZE and LOCAL_RANK without RANK (PyTorch Lightning's "
                            "launcher) on node {}: the global rank is not known; pass shard=(trainer.global_rank, "
                            "trainer.world_size)",
                            node));
  }
  return LaunchInfo{"PyTorch Lightning", local_rank, size, size};
}

struct Found {
  const Family* family;
  LaunchInfo info;
};

std::vector<Found> present(const EnvLookup& env) {
  std::vector<Found> out;
  for (const Family& f : kFamilies) {
    auto rank = number(env, f.rank_var);
    auto size = number(env, f.size_var);
    if (!rank && !size) continue;
    if (f.rank_var == std::string_view("RANK") && !rank && env("LOCAL_RANK")) {
      out.push_back({&f, lightning_launch(env, *size)});
      continue;
    }
    if (!rank || !size) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("launcher environment: {} is set but {} is not", rank ? f.rank_var : f.size_var,
                              rank ? f.size_var : f.rank_var));
    }
    if (*size == 0)
      throw Error(ErrorCode::invalid_option,
                  fmt::format("launcher environment: {}=0; the world has at least one rank", f.size_var));
    if (*rank >= *size) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("launcher environment: {}={} is not below {}={}", f.rank_var, *rank, f.size_var, *size));
    }
    LaunchInfo info{f.name, *rank, *size, std::nullopt};
    std::optional<std::uint32_t> local;
    if (std::string_view(f.name) == "SLURM") {
      // SLURM_NTASKS_PER_NODE is set only with --ntasks-per-node; SLURM_TASKS_PER_NODE always.
      local = env("SLURM_NTASKS_PER_NODE") ? number(env, "SLURM_NTASKS_PER_NODE") : slurm_tasks_on_node(env);
    } else {
      local = number(env, f.local_var);
    }
    if (local && (*local == 0 || *local > *size)) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("launcher environment: {} ranks on this node ({}) is not between 1 and {}={}", f.name,
                              *local, f.size_var, *size));
    }
    info.local_size = local;
    out.push_back({&f, info});
  }
  return out;
}

}  // namespace

std::optional<LaunchInfo> launch_info_from_env(const EnvLookup& env) {
  std::vector<Found> found = present(env);
  if (found.empty()) return std::nullopt;
  LaunchInfo chosen = found.front().info;  // the innermost launcher
  for (std::size_t i = 1; i < found.size(); ++i) {
    const LaunchInfo& other = found[i].info;
    if (other.world_size != chosen.world_size) continue;  // an outer launcher of other processes
    // The same processes, described twice: both descriptions must agree.
    if (other.rank != chosen.rank) {
      throw Error(
          ErrorCode::invalid_option,
          fmt::format(
              "launcher environment: {} says rank {} of {} but {} says rank {} of {} ({}={}, {}={}): the variables "
              "conflict; unset the stale ones",
              chosen.launcher, chosen.rank, chosen.world_size, other.launcher, other.rank, other.world_size,
              found.front().family->rank_var, chosen.rank, found[i].family->rank_var, other.rank));
    }
    if (chosen.local_size && other.local_size && *chosen.local_size != *other.local_size) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("launcher environment: {} says {} ranks on this node but {} says {}: the variables "
                              "conflict; unset the stale ones",
                              chosen.launcher, *chosen.local_size, other.launcher, *other.local_size));
    }
    if (!chosen.local_size) chosen.local_size = other.local_size;
  }
  return chosen;
}

std::uint32_t local_ranks_from_env(const EnvLookup& env) {
  auto info = launch_info_from_env(env);
  if (info && info->local_size) return *info->local_size;
  // A LOCAL_WORLD_SIZE alone (set by hand, or by a launcher that sets no rank) still divides.
  if (auto local = number(env, "LOCAL_WORLD_SIZE"); local && *local > 0) return *local;
  return 1;
}

std::uint32_t local_ranks_for_budget(const EnvLookup& env, std::string& warning) {
  try {
    return local_ranks_from_env(env);
  } catch (const Error& e) {
    warning = fmt::format("{}; the shared-memory budget assumes this is the only rank on this node", e.what());
    return 1;
  }
}

}  // namespace stoker::detail
