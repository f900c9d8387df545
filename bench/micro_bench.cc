// Microbenchmarks of stoker's building blocks, each next to its baseline.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <lmdb.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <new>
#include <numeric>
#include <random>

#include "base/splitmix64.h"
#include "formats/hdf5/hdf5_reader.h"
#include "formats/image/resize.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_reader.h"
#include "loader/device/device_backend.h"
#include "loader/pipeline/ops/color_adjust.h"
#include "loader/shm/segment_layout.h"
#include "loader/shm/shm_segment.h"
#include "tools/common/synthetic_data.h"

namespace {

namespace fs = std::filesystem;
using stoker::formats::Hdf5WriteOptions;

// Small datasets (20k samples of 3 KB), made once per run in a scratch directory.
struct Data {
  fs::path dir = fs::temp_directory_path() / ("stoker-micro-" + std::to_string(::getpid()));
  stoker::Schema schema = stoker::tools::image_schema(20000, 32);
  Data() {
    fs::create_directories(dir);
    stoker::tools::write_synthetic_lmdb(path("d.lmdb"), schema);
    stoker::tools::write_synthetic_hdf5(path("contig.h5"), schema, {Hdf5WriteOptions::Layout::contiguous, 0, 0});
    stoker::tools::write_synthetic_hdf5(path("chunked.h5"), schema, {Hdf5WriteOptions::Layout::chunked, 256, 0});
  }
  ~Data() { fs::remove_all(dir); }
  std::string path(const char* name) const { return (dir / name).string(); }
};

const Data& data() {
  static Data d;
  return d;
}

std::vector<std::uint64_t> random_batch(std::size_t n, std::uint64_t total, std::uint64_t seed) {
  stoker::detail::SplitMix64 rng(seed);
  std::vector<std::uint64_t> v(n);
  for (auto& i : v) i = rng.next() % total;
  return v;
}

void BM_RingPublishConsume(benchmark::State& state) {
  alignas(64) std::byte counters[128], items[64 * 4];
  stoker::detail::SlotRing ring(counters, items, 64);
  ring.initialize();
  std::uint32_t v = 0;
  for (auto _ : state) {
    ring.push(v);
    ring.pop(v);
    benchmark::DoNotOptimize(v);
  }
}
BENCHMARK(BM_RingPublishConsume);

// The clock read that times each pipeline operation per sample (Stats::stages).
void BM_SteadyClockRead(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(std::chrono::steady_clock::now());
}
BENCHMARK(BM_SteadyClockRead);

// Cross-process hand-off: a forked producer passes kRingItems slot numbers to this process, through
// stoker's SlotRing in shared memory against the least a shared-memory SPSC ring can be (two
// counters on their own cache lines, relaxed everywhere but the publishing store and its load).
// The ratio is what the ring's discipline costs; both spin, as a worker and the consumer's drain do.
constexpr std::uint32_t kRingItems = 1 << 20, kRingCapacity = 64;

struct RawShmRing {
  alignas(64) std::atomic<std::uint64_t> write{0};
  alignas(64) std::atomic<std::uint64_t> read{0};
  alignas(64) std::uint32_t items[kRingCapacity];
  bool push(std::uint32_t v) {
    const std::uint64_t w = write.load(std::memory_order_relaxed);
    if (w - read.load(std::memory_order_acquire) == kRingCapacity) return false;
    items[w % kRingCapacity] = v;
    write.store(w + 1, std::memory_order_release);
    return true;
  }
  bool pop(std::uint32_t& v) {
    const std::uint64_t r = read.load(std::memory_order_relaxed);
    if (r == write.load(std::memory_order_acquire)) return false;
    v = items[r % kRingCapacity];
    read.store(r + 1, std::memory_order_release);
    return true;
  }
};

struct StokerRing {
  alignas(64) std::byte counters[128];
  alignas(64) std::byte items[kRingCapacity * 4];
  stoker::detail::SlotRing ring{counters, items, kRingCapacity};
  StokerRing() { ring.initialize(); }
  bool push(std::uint32_t v) { return ring.push(v); }
  bool pop(std::uint32_t& v) { return ring.pop(v); }
};

template <class Ring>
void BM_CrossProcessRing(benchmark::State& state) {
  void* mem = ::mmap(nullptr, sizeof(Ring), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    state.SkipWithError("mmap failed");
    for (auto _ : state) {
    }
    return;
  }
  for (auto _ : state) {
    Ring* ring = new (mem) Ring();
    const pid_t child = ::fork();
    if (child == 0) {
      for (std::uint32_t i = 0; i < kRingItems;) {
        if (ring->push(i)) ++i;
      }
      ::_exit(0);
    }
    std::uint64_t sum = 0;
    for (std::uint32_t got = 0, v = 0; got < kRingItems;) {
      if (ring->pop(v)) {
        sum += v;
        ++got;
      }
    }
    ::waitpid(child, nullptr, 0);
    if (sum != std::uint64_t{kRingItems} * (kRingItems - 1) / 2) state.SkipWithError("items lost or duplicated");
    ring->~Ring();
  }
  ::munmap(mem, sizeof(Ring));
  state.SetItemsProcessed(state.iterations() * kRingItems);
}
BENCHMARK_TEMPLATE(BM_CrossProcessRing, StokerRing)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_TEMPLATE(BM_CrossProcessRing, RawShmRing)->Unit(benchmark::kMillisecond)->UseRealTime();

// The ceiling for stoker's LMDB reads: mdb_get + memcpy into a reused buffer.
void BM_LmdbRawGetMemcpy(benchmark::State& state) {
  const std::string path = data().path("d.lmdb");
  stoker::formats::LmdbEnv env;
  mdb_env_set_maxdbs(env.get(), 4);
  mdb_env_open(env.get(), path.c_str(), MDB_RDONLY | MDB_NOSUBDIR | MDB_NOLOCK | MDB_NORDAHEAD, 0644);
  MDB_txn* txn;
  mdb_txn_begin(env.get(), nullptr, MDB_RDONLY, &txn);
  MDB_dbi dbi;
  mdb_dbi_open(txn, stoker::formats::kSamplesDb, 0, &dbi);
  std::vector<char> buf(data().schema.bytes_per_sample() * 256);
  std::uint64_t seed = 1;
  for (auto _ : state) {
    auto idx = random_batch(256, data().schema.num_samples, seed++);
    for (std::size_t k = 0; k < idx.size(); ++k) {
      unsigned char key[8];
      stoker::formats::encode_key(idx[k], key);
      MDB_val kv{8, key}, v;
      mdb_get(txn, dbi, &kv, &v);
      std::memcpy(buf.data() + k * v.mv_size, v.mv_data, v.mv_size);
    }
  }
  mdb_txn_abort(txn);
  state.SetItemsProcessed(state.iterations() * 256);
  state.SetBytesProcessed(state.iterations() * 256 * static_cast<std::int64_t>(data().schema.bytes_per_sample()));
}
BENCHMARK(BM_LmdbRawGetMemcpy);

void read_batches(benchmark::State& state, stoker::formats::Reader& r) {
  std::vector<std::vector<std::byte>> bufs;
  std::vector<std::byte*> dest;
  for (const auto& f : r.schema().fields) bufs.emplace_back(256 * f.bytes_per_sample());
  for (auto& b : bufs) dest.push_back(b.data());
  std::uint64_t seed = 1;
  for (auto _ : state) r.read(random_batch(256, r.schema().num_samples, seed++), dest);
  state.SetItemsProcessed(state.iterations() * 256);
  state.SetBytesProcessed(state.iterations() * 256 * static_cast<std::int64_t>(r.schema().bytes_per_sample()));
}

void BM_StokerLmdbBatch(benchmark::State& state) {
  stoker::formats::LmdbReader r(data().path("d.lmdb"), {});
  read_batches(state, r);
}
BENCHMARK(BM_StokerLmdbBatch);

void BM_Hdf5Batch(benchmark::State& state, const char* file, stoker::formats::Hdf5Path mode) {
  stoker::formats::Hdf5Reader r(data().path(file), {}, mode);
  read_batches(state, r);
}
BENCHMARK_CAPTURE(BM_Hdf5Batch, contiguous_direct, "contig.h5", stoker::formats::Hdf5Path::automatic);
BENCHMARK_CAPTURE(BM_Hdf5Batch, chunked_direct, "chunked.h5", stoker::formats::Hdf5Path::automatic);
BENCHMARK_CAPTURE(BM_Hdf5Batch, contiguous_hdf5, "contig.h5", stoker::formats::Hdf5Path::hdf5_only);
BENCHMARK_CAPTURE(BM_Hdf5Batch, chunked_hdf5, "chunked.h5", stoker::formats::Hdf5Path::hdf5_only);

// Writing a batch into reused, pre-faulted shared memory (stoker) against a fresh segment per
// batch (what a per-batch shm allocation costs).
constexpr std::size_t kBatchBytes = 8u << 20;

void BM_MemcpyIntoPrefaultedShm(benchmark::State& state) {
  auto seg = stoker::detail::ShmSegment::try_create_shared(kBatchBytes);
  std::vector<char> src(kBatchBytes, 3);
  for (auto _ : state) {
    std::memcpy(seg->data(), src.data(), kBatchBytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(kBatchBytes));
}
BENCHMARK(BM_MemcpyIntoPrefaultedShm);

void BM_MemcpyIntoFreshShm(benchmark::State& state) {
  std::vector<char> src(kBatchBytes, 3);
  for (auto _ : state) {
    std::string name = "/stoker-micro-" + std::to_string(::getpid());
    int fd = ::shm_open(name.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ::shm_unlink(name.c_str());
    if (fd < 0 || ::ftruncate(fd, kBatchBytes) != 0) state.SkipWithError("shm_open");
    void* p = ::mmap(nullptr, kBatchBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    std::memcpy(p, src.data(), kBatchBytes);
    benchmark::ClobberMemory();
    ::munmap(p, kBatchBytes);
    ::close(fd);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(kBatchBytes));
}
BENCHMARK(BM_MemcpyIntoFreshShm);

// Host -> device from pinned memory, the copy the CUDA staging path makes per batch. Reports an
// error row where there is no GPU.
void BM_PinnedCopyToDevice(benchmark::State& state) {
  std::unique_ptr<stoker::detail::DeviceBackend> be;
  try {
    be = stoker::detail::make_device_backend(stoker::Device::cuda(0));
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    for (auto _ : state) {
    }
    return;
  }
  be->bind_thread();
  void* host = be->alloc_pinned(kBatchBytes);
  std::byte* dev = be->alloc_device(kBatchBytes);
  auto stream = be->create_stream();
  auto done = be->create_event(false);
  for (auto _ : state) {
    be->copy_to_device_async(dev, host, kBatchBytes, stream);
    be->record(done, stream);
    be->synchronize(done);
  }
  be->destroy_event(done);
  be->destroy_stream(stream);
  be->free_device(dev);
  be->free_pinned(host);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(kBatchBytes));
}
BENCHMARK(BM_PinnedCopyToDevice);

// The pipeline's antialiased bilinear resize of an RGB u8 image to 224 x 224: from a region about
// twice as large (random_resized_crop after the decoder's DCT scaling), and from a smaller one.
void BM_ResizeRgbTo224(benchmark::State& state) {
  const int in_h = static_cast<int>(state.range(0)), in_w = static_cast<int>(state.range(1));
  std::vector<std::uint8_t> src(static_cast<std::size_t>(in_h) * in_w * 3), dst(224 * 224 * 3);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>((i * 131) ^ (i >> 7));
  stoker::formats::Resizer resizer;
  for (auto _ : state) {
    resizer.run(src.data(), in_h, in_w, 3, static_cast<std::size_t>(in_w) * 3, dst.data(), 224, 224);
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeRgbTo224)->Args({448, 448})->Args({300, 420})->Args({160, 200});

// The validation transform's resize(256),center_crop(224) of a 375 x 500 image (ImageNet's most
// common size): the resize made whole (256 x 341) then cropped (0), against the crop's window of it
// only (1), which the pipeline runs when center_crop follows resize.
void BM_ResizeShorterSideThenCrop224(benchmark::State& state) {
  const bool window = state.range(0) != 0;
  const int in_h = 375, in_w = 500, oh = 256, ow = 341;
  std::vector<std::uint8_t> src(static_cast<std::size_t>(in_h) * in_w * 3),
      whole(static_cast<std::size_t>(oh) * ow * 3), dst(224 * 224 * 3);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>((i * 131) ^ (i >> 7));
  stoker::formats::Resizer resizer;
  const stoker::formats::Resizer::Window crop{16, 58, 224, 224};
  for (auto _ : state) {
    if (window) {
      resizer.run(src.data(), in_h, in_w, 3, static_cast<std::size_t>(in_w) * 3, dst.data(), oh, ow, crop);
    } else {
      resizer.run(src.data(), in_h, in_w, 3, static_cast<std::size_t>(in_w) * 3, whole.data(), oh, ow);
      for (int y = 0; y < 224; ++y) {
        std::memcpy(&dst[static_cast<std::size_t>(y) * 224 * 3],
                    &whole[(static_cast<std::size_t>(crop.y + y) * ow + crop.x) * 3], 224 * 3);
      }
    }
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ResizeShorterSideThenCrop224)->Arg(0)->Arg(1);

// color_jitter on a 224 x 224 RGB image, torchvision's formulas: brightness, contrast and
// saturation (0), hue (1), all four (2).
void BM_ColorJitter224(benchmark::State& state) {
  std::vector<std::uint8_t> src(224 * 224 * 3), img(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint8_t>((i * 131) ^ (i >> 7));
  stoker::detail::ColorJitterParams p;
  p.order = {2, 0, 3, 1};
  if (state.range(0) != 1) p.brightness = 1.2, p.contrast = 0.7, p.saturation = 1.3;
  if (state.range(0) != 0) p.hue = 0.05;
  for (auto _ : state) {
    std::memcpy(img.data(), src.data(), src.size());
    stoker::detail::color_jitter(img.data(), 224 * 224, 3, p);
    benchmark::DoNotOptimize(img.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ColorJitter224)->Arg(0)->Arg(1)->Arg(2);

}  // namespace

BENCHMARK_MAIN();
