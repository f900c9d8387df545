#include "loader/plan/launcher_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "stoker/error.h"

namespace stoker::detail {
namespace {

using ::testing::HasSubstr;

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

// The message of the error launch_info_from_env throws for `env`: an invalid_option, as every
// launcher variable the loader cannot take is.
std::string error_of(const FakeEnv& env) {
  try {
    launch_info_from_env(env.lookup());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option) << e.what();
    return e.what();
  }
  return "no error";
}

// PyTorch Lightning's launcher sets WORLD_SIZE, LOCAL_RANK and NODE_RANK but no RANK: on node 0
// the rank is the local one, and WORLD_SIZE bounds the ranks on the node; elsewhere the rank is
// not known, which the error says with what to pass instead.
TEST(LauncherEnv, PyTorchLightningsLauncherOnItsFirstNode) {
  FakeEnv env;
  env.vars = {{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"NODE_RANK", "0"}};
  const auto info = launch_info_from_env(env.lookup());
  ASSERT_TRUE(info);
  EXPECT_EQ(*info, (LaunchInfo{"PyTorch Lightning", 1, 2, 2}));
  EXPECT_EQ(local_ranks_from_env(env.lookup()), 2u);
  env.vars.erase("NODE_RANK");
  EXPECT_EQ(launch_info_from_env(env.lookup())->rank, 1u);
  env.vars["NODE_RANK"] = "1";
  EXPECT_THAT(error_of(env), HasSubstr("on node 1: the global rank is not known; pass shard=(trainer.global_rank"));
  env.vars = {{"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}};
  EXPECT_THAT(error_of(env), HasSubstr("LOCAL_RANK=2 is not below WORLD_SIZE=2"));
  env.vars = {{"WORLD_SIZE", "2"}};
  EXPECT_THAT(error_of(env), HasSubstr("WORLD_SIZE is set but RANK is not"));
}

TEST(LauncherEnv, EachLauncherAlone) {
  FakeEnv env;
  EXPECT_EQ(launch_info_from_env(env.lookup()), std::nullopt);
  EXPECT_EQ(local_ranks_from_env(env.lookup()), 1u);

  env.vars = {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"}};
  auto torchrun = launch_info_from_env(env.lookup());
  ASSERT_TRUE(torchrun);
  EXPECT_EQ(torchrun->launcher, "torchrun");
  EXPECT_EQ(torchrun->rank, 3u);
  EXPECT_EQ(torchrun->world_size, 8u);
  EXPECT_EQ(torchrun->local_size, 4u);

  env.vars = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_EQ(launch_info_from_env(env.lookup())->launcher, "Open MPI");
  EXPECT_EQ(local_ranks_from_env(env.lookup()), 2u);

  env.vars = {{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}, {"MPI_LOCALNRANKS", "3"}};
  EXPECT_EQ(launch_info_from_env(env.lookup())->rank, 5u);
  EXPECT_EQ(local_ranks_from_env(env.lookup()), 3u);

  // SLURM: the tasks on this node from SLURM_TASKS_PER_NODE and SLURM_NODEID ("2(x3),1": nodes 0-2
  // run 2 tasks, node 3 runs 1).
  env.vars = {{"SLURM_PROCID", "6"}, {"SLURM_NTASKS", "7"}, {"SLURM_TASKS_PER_NODE", "2(x3),1"}, {"SLURM_NODEID", "3"}};
  auto slurm = launch_info_from_env(env.lookup());
  EXPECT_EQ(slurm->launcher, "SLURM");
  EXPECT_EQ(slurm->rank, 6u);
  EXPECT_EQ(slurm->local_size, 1u);
  env.vars["SLURM_NODEID"] = "1";
  EXPECT_EQ(local_ranks_from_env(env.lookup()), 2u);
  env.vars["SLURM_NTASKS_PER_NODE"] = "2";
  EXPECT_EQ(local_ranks_from_env(env.lookup()), 2u);
}

TEST(LauncherEnv, NestedLaunchersTheInnermostWins) {
  // torchrun with 4 workers per node, started by srun on 2 nodes (one task per node).
  FakeEnv env;
  env.vars = {{"RANK", "5"},         {"WORLD_SIZE", "8"},   {"LOCAL_WORLD_SIZE", "4"},
              {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_NTASKS_PER_NODE", "1"}};
  auto info = launch_info_from_env(env.lookup());
  EXPECT_EQ(info->launcher, "torchrun");
  EXPECT_EQ(info->rank, 5u);
  EXPECT_EQ(info->local_size, 4u);
}

TEST(LauncherEnv, TheSameProcessesDescribedTwiceMustAgree) {
  FakeEnv env;
  // srun --mpi=pmi2: PMI and SLURM describe the same tasks.
  env.vars = {{"PMI_RANK", "2"},
              {"PMI_SIZE", "4"},
              {"SLURM_PROCID", "2"},
              {"SLURM_NTASKS", "4"},
              {"SLURM_NTASKS_PER_NODE", "2"}};
  auto info = launch_info_from_env(env.lookup());
  EXPECT_EQ(info->launcher, "PMI");
  EXPECT_EQ(info->local_size, 2u);  // PMI did not say; SLURM did, for the same processes
  env.vars["SLURM_PROCID"] = "3";
  EXPECT_THAT(error_of(env), HasSubstr("PMI says rank 2 of 4 but SLURM says rank 3 of 4"));
  EXPECT_THAT(error_of(env), HasSubstr("conflict"));
  env.vars["SLURM_PROCID"] = "2";
  env.vars["MPI_LOCALNRANKS"] = "4";
  EXPECT_THAT(error_of(env), HasSubstr("PMI says 4 ranks on this node but SLURM says 2"));
}

TEST(LauncherEnv, MalformedOrHalfSetVariablesAreErrors) {
  FakeEnv env;
  env.vars = {{"RANK", "0"}};
  EXPECT_THAT(error_of(env), HasSubstr("RANK is set but WORLD_SIZE is not"));
  env.vars = {{"RANK", "x"}, {"WORLD_SIZE", "2"}};
  EXPECT_THAT(error_of(env), HasSubstr("RANK='x' is not a non-negative integer"));
  env.vars = {{"RANK", "2"}, {"WORLD_SIZE", "2"}};
  EXPECT_THAT(error_of(env), HasSubstr("RANK=2 is not below WORLD_SIZE=2"));
  env.vars = {{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}};
  EXPECT_THAT(error_of(env), HasSubstr("PMI_SIZE=0"));
  env.vars = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "3"}};
  EXPECT_THAT(error_of(env), HasSubstr("ranks on this node (3) is not between 1 and WORLD_SIZE=2"));
  env.vars = {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_TASKS_PER_NODE", "2(y3)"}, {"SLURM_NODEID", "0"}};
  EXPECT_THAT(error_of(env), HasSubstr("SLURM_TASKS_PER_NODE='2(y3)' is malformed"));
}

// Sizing shared memory never asked for sharding: a stray or malformed launcher variable counts as
// one rank on this node, with a warning that says which variable and what was assumed.
TEST(LauncherEnv, TheBudgetAssumesOneRankWhereTheVariablesAreMalformed) {
  FakeEnv env;
  std::string warning;
  EXPECT_EQ(local_ranks_for_budget(env.lookup(), warning), 1u);
  EXPECT_EQ(warning, "");
  env.vars = {{"RANK", "0"}};
  EXPECT_EQ(local_ranks_for_budget(env.lookup(), warning), 1u);
  EXPECT_THAT(warning, HasSubstr("RANK is set but WORLD_SIZE is not"));
  EXPECT_THAT(warning, HasSubstr("assumes this is the only rank on this node"));
  warning.clear();
  env.vars = {{"SLURM_PROCID", "3"}};
  EXPECT_EQ(local_ranks_for_budget(env.lookup(), warning), 1u);
  EXPECT_THAT(warning, HasSubstr("SLURM_PROCID is set but SLURM_NTASKS is not"));
  warning.clear();
  env.vars = {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}};
  EXPECT_EQ(local_ranks_for_budget(env.lookup(), warning), 2u);
  EXPECT_EQ(warning, "");
}

}  // namespace
}  // namespace stoker::detail
