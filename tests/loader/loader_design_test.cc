// loader: what a Loader will be, decided from its options alone (no file, memory, process or thread).
#include "loader/loader_design.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "stoker/error.h"
#include "tests/support/test_data.h"

namespace stoker::detail {
namespace {

TEST(LoaderDesign, FixedOptionsAreTakenAsTheyAre) {
  Options o;
  o.num_workers = 3;
  o.prefetch = 5;
  o.fields = {"image"};
  o.group = "train";
  const LoaderDesign d = design_loader(o, 8);
  EXPECT_EQ(d.num_workers, 3u);
  EXPECT_EQ(d.prefetch, 5u);
  EXPECT_FALSE(d.auto_workers);
  EXPECT_FALSE(d.auto_prefetch);
  EXPECT_EQ(d.order, Order::sequential);
  EXPECT_TRUE(d.reader_options.sequential) << "a sequential order lets the kernel read ahead";
  EXPECT_EQ(d.reader_options.fields, std::vector<std::string>{"image"});
  EXPECT_EQ(d.reader_options.group, "train");
  EXPECT_EQ(tuner_limits(d, 15), std::nullopt);
}

TEST(LoaderDesign, AutoForksOneWorkerPerUsableCpuUpToSixteenAndStartsSmall) {
  Options o;
  o.num_workers = kAuto;
  o.prefetch = kAuto;
  EXPECT_EQ(design_loader(o, 0).num_workers, 1u) << "unknown CPU count";
  EXPECT_EQ(design_loader(o, 64).num_workers, 16u);
  const LoaderDesign d = design_loader(o, 6);
  EXPECT_EQ(d.num_workers, 6u);
  EXPECT_EQ(d.prefetch, kAutoMaxPrefetch);
  const auto limits = tuner_limits(d, 20);
  ASSERT_TRUE(limits);
  EXPECT_EQ(limits->max_workers, 6u);
  EXPECT_EQ(limits->max_depth, 20u);
  EXPECT_EQ(limits->start_workers, 1u);
  EXPECT_EQ(limits->start_prefetch, 2u);
  EXPECT_EQ(limits->cached_depth, 0u) << "slots of unknown size";
  EXPECT_EQ(tuner_limits(d, 20, 800 << 10, 32 << 20)->cached_depth, 20u) << "at most the ring";
  EXPECT_EQ(tuner_limits(d, 20, 5 << 20, 32 << 20)->cached_depth, 3u) << "half of 32 MiB holds 3 slots of 5";
  EXPECT_EQ(tuner_limits(d, 20, 5 << 20, 0)->cached_depth, 0u) << "a cache of unknown size";
  o.held_batches = 1;  // a batch the loop holds rotates through the cache too
  EXPECT_EQ(tuner_limits(design_loader(o, 6), 20, 5 << 20, 32 << 20)->cached_depth, 2u);
  EXPECT_EQ(tuner_limits(design_loader(o, 6), 20, 20 << 20, 32 << 20)->cached_depth, 0u);
  o.held_batches = 0;
  o.num_workers = 4;  // only the depth automatic: the workers are what they are
  const auto depth_only = tuner_limits(design_loader(o, 6), 16);
  ASSERT_TRUE(depth_only);
  EXPECT_FALSE(depth_only->tune_workers);
  EXPECT_EQ(depth_only->start_workers, 4u);
}

// Batches the loop keeps have ring slots of their own on the CPU, which the tuner's depth leaves
// out; on a staged device they hold device buffers, and the ring is the staging thread's.
TEST(LoaderDesign, HeldBatchesAreSlotsOnTheCpuAndDeviceBuffersOnADevice) {
  Options o;
  o.num_workers = kAuto;
  o.held_batches = 2;
  const LoaderDesign cpu = design_loader(o, 4);
  EXPECT_EQ(cpu.held_slots, 2u);
  const auto limits = tuner_limits(cpu, 4 * 2 + 2);
  ASSERT_TRUE(limits);
  EXPECT_EQ(limits->max_depth, 8u);
  o.device = Device::emulated();
  EXPECT_EQ(design_loader(o, 4).held_slots, 0u);
}

TEST(LoaderDesign, ShuffleIsTheRandomOrderAndQuasiRandomKeepsWorkersOnAWindow) {
  Options o;
  o.shuffle = true;
  LoaderDesign d = design_loader(o, 2);
  EXPECT_EQ(d.order, Order::random);
  EXPECT_FALSE(d.reader_options.sequential);
  EXPECT_EQ(affinity_span(d, 256, 1, 32), 0u);
  o.order = Order::quasi_random;
  d = design_loader(o, 2);
  EXPECT_EQ(d.order, Order::quasi_random) << "shuffle only replaces the sequential order";
  // A window of 4 groups of 256 samples, cut into 2 ranks: 512 samples a rank, 16 batches of 32.
  EXPECT_EQ(affinity_span(d, 256, 2, 32), 16u);
  EXPECT_EQ(affinity_span(d, 2, 8, 64), 1u) << "at least one batch";
}

TEST(LoaderDesign, BytesFieldsCannotGoToAStagedDevice) {
  Schema s;
  s.num_samples = 4;
  s.fields = {Field::bytes_field("jpeg"), {"label", FieldKind::fixed, DType::i64, {}}};
  Options o;
  o.source = "photos.lmdb";
  check_fields_fit_device(s, o);  // the CPU takes them
  o.device = Device::emulated();
  try {
    check_fields_fit_device(s, o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("photos.lmdb: field(s) jpeg are variable-length bytes"));
  }
}

// CPU quotas as cgroup v2 and v1 write them (docker --cpus=1.5 is 150000 per 100000), for the
// process's own cgroup and those above it, as /proc/self/cgroup names it.
TEST(LoaderDesign, TheCgroupsCpuQuotaIsTheSmallestOnTheWayUpAsV2OrV1WritesIt) {
  test::TempDir tmp;
  auto root = [&](const std::string& name) { return tmp.path(name); };
  auto write = [&](const std::string& name, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(tmp.path(name)).parent_path());
    std::ofstream(tmp.path(name)) << text;
  };
  EXPECT_EQ(cgroup_cpu_quota(root("none"), ""), 0u) << "no cgroup files: no quota";
  EXPECT_EQ(cgroup_cpu_quota(root("none"), "0::/a/b\n"), 0u);

  // v2, a container's own: the hierarchy's root.
  write("v2/cpu.max", "150000 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root("v2"), "0::/\n"), 2u) << "1.5 CPUs' time: 2 CPUs in use";
  EXPECT_EQ(cgroup_cpu_quota(root("v2"), ""), 2u) << "no /proc/self/cgroup: the root";
  // v2, a slice within a slice: the smaller quota holds, wherever it is.
  write("v2nest/job.slice/cpu.max", "300000 100000\n");
  write("v2nest/job.slice/step/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root("v2nest"), "0::/job.slice/step\n"), 3u);
  write("v2nest/job.slice/step/cpu.max", "100000 100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root("v2nest"), "0::/job.slice/step\n"), 1u);
  // A path the mount does not show (a container without its own cgroup namespace): the levels it has.
  EXPECT_EQ(cgroup_cpu_quota(root("v2"), "0::/docker/0123abcd\n"), 2u);
  // None, or nothing a CPU count can be made of.
  for (const char* text : {"max 100000", "lots 100000", "inf 100000", "100000 0", "17592186044415 1000"}) {
    write("v2odd/cpu.max", text);
    EXPECT_EQ(cgroup_cpu_quota(root("v2odd"), "0::/\n"), 0u) << text;
  }

  // v1: the cpu controller, alone or mounted with cpuacct.
  write("v1/cpu/cpu.cfs_quota_us", "50000\n");
  write("v1/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root("v1"), "4:memory:/\n3:cpu:/\n"), 1u);
  write("v1joint/cpu,cpuacct/batch/cpu.cfs_quota_us", "400000\n");
  write("v1joint/cpu,cpuacct/batch/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root("v1joint"), "2:cpu,cpuacct:/batch\n"), 4u);
  EXPECT_EQ(cgroup_cpu_quota(root("v1joint"), "2:cpuacct:/batch\n"), 0u) << "cpuacct alone sets no quota";
  write("v1none/cpu/cpu.cfs_quota_us", "-1\n");
  write("v1none/cpu/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_quota(root("v1none"), "3:cpu:/\n"), 0u);
}

TEST(LoaderDesign, FarMoreWorkersThanCpusIsAWarningThatSaysHowMany) {
  EXPECT_EQ(oversubscription_warning(8, 2),
            "8 workers are more than twice the 2 CPUs this process may run on: they take turns on them, each batch "
            "waiting its turn, and each costs memory; 4 or fewer load as fast");
  EXPECT_THAT(oversubscription_warning(3, 1), ::testing::HasSubstr("3 workers are more than twice the 1 CPU this"));
  EXPECT_EQ(oversubscription_warning(4, 2), "");  // a few more than CPUs may hide storage latency
  EXPECT_EQ(oversubscription_warning(0, 1), "");
  EXPECT_EQ(oversubscription_warning(64, 0), "");  // the CPUs unknown: no guess
  EXPECT_GE(usable_cpus(), 1u);
  // Said once: the first Loader that asks for too many hears it, no later one.
  std::atomic<bool> said{false};
  const std::size_t too_many = 2 * std::size_t{usable_cpus()} + 1;
  EXPECT_NE(oversubscription_warning_once(too_many, said), "");
  EXPECT_EQ(oversubscription_warning_once(too_many, said), "");
  std::atomic<bool> fresh{false};
  EXPECT_EQ(oversubscription_warning_once(2, fresh), "");
  EXPECT_FALSE(fresh.load());  // a Loader that fits does not use up the warning
}

// The cache a CPU's cores share, as sysfs describes it: the deepest data or unified level up to 3.
TEST(LoaderDesign, TheLastLevelCacheIsTheDeepestDataCacheSysfsDescribes) {
  test::TempDir tmp;
  const auto cache = [&](int index, const std::string& level, const std::string& type, const std::string& size) {
    const std::filesystem::path dir = tmp.dir() / fmt::format("index{}", index);
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "level") << level << "\n";
    std::ofstream(dir / "type") << type << "\n";
    std::ofstream(dir / "size") << size << "\n";
  };
  EXPECT_EQ(cache_bytes_in(tmp.dir().string()), 0u) << "none described";
  cache(0, "1", "Data", "48K");
  cache(1, "1", "Instruction", "32K");
  cache(2, "2", "Unified", "1024K");
  EXPECT_EQ(cache_bytes_in(tmp.dir().string()), 1u << 20);
  cache(3, "3", "Unified", "32768K");
  cache(4, "4", "Unified", "128M");  // memory-side eDRAM
  EXPECT_EQ(cache_bytes_in(tmp.dir().string()), 32u << 20);
  cache(3, "3", "Unified", "lots");
  EXPECT_EQ(cache_bytes_in(tmp.dir().string()), 1u << 20) << "a size it cannot read is no cache";
  EXPECT_EQ(cache_bytes_in(tmp.path("missing")), 0u);
}

}  // namespace
}  // namespace stoker::detail
