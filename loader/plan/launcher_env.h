// What the process launcher says about this process: its rank and the world size (for sharding)
// and how many ranks share this node (for dividing the node's shared memory).
//
// Launcher families, innermost first (a launcher started by another sets its own variables on top
// of the outer one's):
//   torchrun   RANK, WORLD_SIZE, LOCAL_WORLD_SIZE
//   Open MPI   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE
//   PMI        PMI_RANK, PMI_SIZE, MPI_LOCALNRANKS (MPICH, Intel MPI, srun --mpi=pmi2)
//   SLURM      SLURM_PROCID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE + SLURM_NODEID
// Rules (docs/distributed.md): a family counts when its rank and size are both set (one without
// the other is an error); malformed numbers, a zero world or a rank not below it are errors. Two
// families with the same world size describe the same processes and must agree on the rank and the
// local size; with different world sizes they are nested launchers (torchrun inside an srun
// allocation, mpirun on SLURM) and the innermost wins. Nothing is guessed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace stoker::detail {

struct LaunchInfo {
  std::string launcher;  // "torchrun", "Open MPI", "PMI", "SLURM", "PyTorch Lightning"
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  std::optional<std::uint32_t> local_size;  // ranks on this node, when the launcher says
  bool operator==(const LaunchInfo&) const = default;
};

using EnvLookup = std::function<const char*(const char*)>;

// nullopt when no launcher's variables are set; throws stoker::Error for a malformed or
// conflicting set.
std::optional<LaunchInfo> launch_info_from_env(const EnvLookup& getenv_fn);

// Ranks sharing this node, from the launcher (1 when there is none or it does not say). Throws
// stoker::Error for a malformed or conflicting set, as launch_info_from_env does.
std::uint32_t local_ranks_from_env(const EnvLookup& getenv_fn);

// The same for sizing shared memory, where sharding was not asked for: a malformed or conflicting
// set (a stray RANK=0, SLURM_PROCID without SLURM_NTASKS) must not stop a loader, so it counts as
// one rank on this node and `warning` says why. Shard::from_env() stays strict.
std::uint32_t local_ranks_for_budget(const EnvLookup& getenv_fn, std::string& warning);

}  // namespace stoker::detail
