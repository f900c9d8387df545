// The staging pipeline, run on the emulated device (host memory, a thread per stream), and the
// CUDA device where there is one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <lmdb.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <future>
#include <set>
#include <thread>

#include "formats/lmdb/lmdb_env.h"
#include "loader/device/device_backend.h"
#include "loader/device/device_buffer_pool.h"
#include "loader/device/emulated_device.h"
#include "loader/device/stager_factory.h"
#include "loader/plan/shuffle.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

// Waits (inline) for the batch's copy, then checks every field against the generator.
void expect_contents(Batch& b, const Schema& schema) {
  b.ready_on(nullptr);  // the emulated device's null stream runs the wait at once
  ASSERT_EQ(b.fields().size(), schema.fields.size());
  for (std::size_t f = 0; f < schema.fields.size(); ++f) {
    const FieldView& v = b.fields()[f];
    EXPECT_EQ(v.device, Device::emulated());
    for (std::size_t k = 0; k < b.size(); ++k) {
      auto want = expected_field(schema.fields[f], b.indices()[k]);
      ASSERT_EQ(0, std::memcmp(v.data + k * want.size(), want.data(), want.size()))
          << schema.fields[f].name << " sample " << b.indices()[k];
    }
  }
}

class EmulatedDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = small_schema(200);
    write_lmdb(tmp_.path("d.lmdb"), schema_);
  }
  Options options(std::size_t workers, Staging staging) {
    Options o;
    o.source = tmp_.path("d.lmdb");
    o.num_workers = workers;
    o.batch_size = 16;
    o.device = Device::emulated();
    o.staging = staging;
    o.shuffle = true;
    o.seed = 3;
    return o;
  }
  TempDir tmp_;
  Schema schema_;
};

TEST_F(EmulatedDevice, BatchesArriveInOrderWithExactContentsThroughEitherStaging) {
  EXPECT_EQ(Options{}.staging, Staging::automatic);
  for (Staging staging : {Staging::pinned_copy, Staging::registered_shm, Staging::automatic}) {
    for (std::size_t workers : {0, 2}) {
      SCOPED_TRACE(testing::Message() << "staging " << static_cast<int>(staging) << " workers " << workers);
      Loader loader(options(workers, staging));
      for (std::uint64_t epoch : {0, 1}) {
        std::vector<std::uint64_t> order;
        std::uint64_t index = 0;
        for (Batch& b : loader.epoch(epoch)) {
          EXPECT_EQ(b.index(), index++);
          EXPECT_EQ(b.device(), Device::emulated());
          EXPECT_NE(b.ready_event(), nullptr);
          expect_contents(b, schema_);
          order.insert(order.end(), b.indices().begin(), b.indices().end());
        }
        EXPECT_EQ(order, detail::permutation(200, 3, epoch));
      }
      Stats s = loader.stats();
      EXPECT_EQ(s.h2d_bytes, 2u * 200 * schema_.bytes_per_sample());
      EXPECT_EQ(s.gpu_steps, 26u);  // every ready_on resolved
      // The emulated device page-locks anything: the default takes the registered path.
      EXPECT_EQ(s.staging, staging == Staging::pinned_copy ? Staging::pinned_copy : Staging::registered_shm);
    }
  }
}

// A device that refuses to page-lock host memory (a container's limit, an unsupported mapping),
// otherwise the emulated one.
class RefusesToPageLock final : public detail::DeviceBackend {
 public:
  RefusesToPageLock() : inner_(detail::make_device_backend(Device::emulated())) {}
  const Device& device() const override { return inner_->device(); }
  void bind_thread() override { inner_->bind_thread(); }
  void* alloc_pinned(std::size_t bytes) override { return inner_->alloc_pinned(bytes); }
  void free_pinned(void* p) noexcept override { inner_->free_pinned(p); }
  std::byte* alloc_device(std::size_t bytes) override { return inner_->alloc_device(bytes); }
  void free_device(std::byte* p) noexcept override { inner_->free_device(p); }
  bool register_host(void*, std::size_t) override { return false; }
  void unregister_host(void*) noexcept override {}
  detail::StreamHandle create_stream() override { return inner_->create_stream(); }
  void destroy_stream(detail::StreamHandle s) noexcept override { inner_->destroy_stream(s); }
  detail::EventHandle create_event(bool timing) override { return inner_->create_event(timing); }
  void destroy_event(detail::EventHandle e) noexcept override { inner_->destroy_event(e); }
  void copy_to_device_async(std::byte* dst, const void* src, std::size_t bytes, detail::StreamHandle s) override {
    inner_->copy_to_device_async(dst, src, bytes, s);
  }
  void copy_to_host(void* dst, const std::byte* src, std::size_t bytes) override {
    inner_->copy_to_host(dst, src, bytes);
  }
  void record(detail::EventHandle e, detail::StreamHandle s) override { inner_->record(e, s); }
  void stream_wait(detail::StreamHandle s, detail::EventHandle e) override { inner_->stream_wait(s, e); }
  bool query(detail::EventHandle e) override { return inner_->query(e); }
  void synchronize(detail::EventHandle e) override { inner_->synchronize(e); }
  double elapsed_seconds(detail::EventHandle a, detail::EventHandle b) override {
    return inner_->elapsed_seconds(a, b);
  }

 private:
  std::unique_ptr<detail::DeviceBackend> inner_;
};

TEST(StagerChoice, TheDefaultFallsBackQuietlyAndRegisteredByNameSaysSo) {
  const Schema schema = small_schema(10);
  std::vector<std::byte> slots(4096);
  for (Staging staging : {Staging::automatic, Staging::registered_shm, Staging::pinned_copy}) {
    SCOPED_TRACE(testing::Message() << "staging " << static_cast<int>(staging));
    auto pool = std::make_shared<detail::DeviceBufferPool>(std::make_unique<RefusesToPageLock>(), schema, 4, 2);
    std::vector<std::string> warnings;
    auto stager = detail::make_stager(staging, *pool, slots.data(), slots.size(),
                                      [&](const std::string& w) { warnings.push_back(w); });
    EXPECT_EQ(stager->kind(), Staging::pinned_copy);
    if (staging == Staging::registered_shm) {
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_THAT(warnings[0], HasSubstr("cannot page-lock the shared-memory slots"));
    } else {
      EXPECT_TRUE(warnings.empty()) << warnings.front();
    }
  }
  // Where the device page-locks them, both registered stagings take the registered path.
  for (Staging staging : {Staging::automatic, Staging::registered_shm}) {
    auto pool =
        std::make_shared<detail::DeviceBufferPool>(detail::make_device_backend(Device::emulated()), schema, 4, 2);
    auto stager = detail::make_stager(staging, *pool, slots.data(), slots.size(), [](const std::string&) {});
    EXPECT_EQ(stager->kind(), Staging::registered_shm);
  }
}

TEST_F(EmulatedDevice, ABufferIsReusedOnlyAfterTheStreamsRecordedOnItFinish) {
  Options o = options(1, Staging::pinned_copy);
  o.prefetch_to_device = 1;  // two device buffers: the second batch after the first reuses its buffer
  Loader loader(o);
  auto user = detail::make_emulated_backend();
  detail::StreamHandle step = user->create_stream();
  Epoch epoch = loader.epoch(0);

  std::optional<Batch> b0 = epoch.next();
  std::optional<Batch> b1 = epoch.next();  // both buffers are now held
  expect_contents(*b0, schema_);
  const std::byte* buffer = b0->fields()[0].data;
  const std::vector<std::byte> snapshot(buffer, buffer + b0->fields()[0].bytes);
  // A long "training step" on the user's stream reads batch 0's memory after the Batch is gone.
  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::atomic<bool> intact_during_step{false};
  b0->ready_on(step);
  detail::emulated_enqueue(step, [&, open] {
    open.wait();
    intact_during_step = std::memcmp(buffer, snapshot.data(), snapshot.size()) == 0;
  });
  b0.reset();

  std::optional<Batch> b2 = epoch.next();  // staged into batch 0's buffer, the only free one
  ASSERT_EQ(b2->fields()[0].data, buffer);
  EXPECT_EQ(0, std::memcmp(buffer, snapshot.data(), snapshot.size())) << "overwritten while the step could read it";
  gate.set_value();
  expect_contents(*b2, schema_);  // the copy ran once the step finished
  EXPECT_TRUE(intact_during_step);
  expect_contents(*b1, schema_);
  b1.reset();
  b2.reset();
  user->destroy_stream(step);
}

TEST_F(EmulatedDevice, ThePoolNeverGrowsAndHoldingItAllIsAClearError) {
  Options o = options(2, Staging::pinned_copy);
  o.prefetch_to_device = 2;
  Loader loader(o);
  std::set<const std::byte*> buffers;
  for (Batch& b : loader.epoch(0)) {
    expect_contents(b, schema_);
    buffers.insert(b.fields()[0].data);
  }
  EXPECT_LE(buffers.size(), 3u);
  Epoch epoch = loader.epoch(1);
  std::vector<Batch> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::move(*epoch.next()));
  try {
    epoch.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::slots_held) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("all 3 device buffers are held"));
    EXPECT_THAT(e.what(), HasSubstr("raise Options::held_batches to the number of batches you keep"));
  }
  held.erase(held.begin());
  auto next = epoch.next();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->index(), 3u);
  expect_contents(*next, schema_);
}

// Batches the loop keeps (Options::held_batches) have device buffers of their own, beyond those
// staged ahead; the host ring is the staging thread's and does not grow for them.
TEST_F(EmulatedDevice, HeldBatchesHaveDeviceBuffersOfTheirOwn) {
  Options o = options(2, Staging::pinned_copy);
  o.prefetch_to_device = 2;
  o.held_batches = 3;
  Loader loader(o);
  EXPECT_EQ(loader.stats().depth, 2u * o.prefetch);
  Epoch epoch = loader.epoch(0);
  std::vector<Batch> held;
  for (std::uint64_t i = 0; i < 4; ++i) {  // the fourth comes while three are kept
    std::optional<Batch> b = epoch.next();
    ASSERT_TRUE(b);
    EXPECT_EQ(b->index(), i);
    expect_contents(*b, schema_);
    held.push_back(std::move(*b));
    if (held.size() > 3) held.erase(held.begin());
  }
  for (int i = 0; i < 2; ++i) held.push_back(std::move(*epoch.next()));  // five kept: every buffer
  try {
    epoch.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::slots_held) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("all 5 device buffers are held"));
  }
}

TEST_F(EmulatedDevice, BatchesHeldWhenTheLoaderIsDestroyedStayValid) {
  std::vector<Batch> kept;
  {
    Loader loader(options(2, Staging::registered_shm));
    Epoch epoch = loader.epoch(0);
    kept.push_back(std::move(*epoch.next()));
    kept.push_back(std::move(*epoch.next()));
  }
  for (Batch& b : kept) expect_contents(b, schema_);
}

// Epoch::wait through the staging thread: false while the only worker is stopped, true once a
// batch is staged, and true at the end of the epoch (next() then answers at once).
TEST_F(EmulatedDevice, WaitSaysWhetherNextWouldWaitThroughTheStagingThread) {
  ::alarm(60);
  Options o = options(1, Staging::pinned_copy);
  o.shuffle = false;
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  ASSERT_EQ(0, ::kill(loader.worker_pids().at(0), SIGSTOP));
  std::uint64_t delivered = 0;
  while (epoch.wait(std::chrono::milliseconds(200))) {  // what was filled and staged before it stopped
    ASSERT_TRUE(epoch.next());
    ++delivered;
  }
  const double waited = loader.stats().wait_seconds;
  EXPECT_FALSE(epoch.wait(std::chrono::milliseconds(50)));
  EXPECT_GE(loader.stats().wait_seconds - waited, 0.05);  // that wait is the training loop's stall
  ASSERT_EQ(0, ::kill(loader.worker_pids().at(0), SIGCONT));
  for (;;) {
    while (!epoch.wait(std::chrono::milliseconds(50))) {
    }
    auto b = epoch.next();
    if (!b) break;
    EXPECT_EQ(b->index(), delivered++);
    expect_contents(*b, schema_);
  }
  EXPECT_EQ(delivered, loader.batches_per_epoch());
  EXPECT_TRUE(epoch.wait(std::chrono::milliseconds(0)));
  ::alarm(0);
}

TEST_F(EmulatedDevice, AWorkerErrorArrivesAtItsTurnThroughTheStagingThread) {
  // Sample 40 of a copy has a value of the wrong size: batch 2 (samples 32..47) fails.
  const std::string p = tmp_.path("bad.lmdb");
  write_lmdb(p, schema_);
  overwrite_lmdb_record(p, 40, "abc");
  Options o = options(2, Staging::pinned_copy);
  o.source = p;
  o.shuffle = false;
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  for (int i = 0; i < 2; ++i) {
    auto b = epoch.next();
    expect_contents(*b, schema_);
  }
  try {
    epoch.next();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::dataset) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("batch 2 of epoch 0"));
    EXPECT_THAT(e.what(), HasSubstr("sample 40"));
  }
  std::uint64_t later = 0;
  while (auto b = epoch.next()) {
    EXPECT_EQ(b->index(), 3 + later++);
    expect_contents(*b, schema_);
  }
  EXPECT_EQ(later, 10u);  // batches 3..12 of 13
}

TEST_F(EmulatedDevice, DestroyingTheLoaderWhileItsWorkerIsStuckDoesNotHang) {
  ::alarm(60);  // watchdog: a hang fails the test instead of CI
  Options o = options(1, Staging::pinned_copy);
  o.shutdown_grace = std::chrono::milliseconds(100);
  {
    Loader loader(o);
    ASSERT_EQ(0, ::kill(loader.worker_pids().at(0), SIGSTOP));
    loader.epoch(0);  // the staging thread starts waiting for the stopped worker
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(descendants().empty());
  ::alarm(0);
}

TEST_F(EmulatedDevice, BadDeviceOptionsAreRefusedBeforeAnyWorkerStarts) {
  Options o = options(2, Staging::pinned_copy);
  o.prefetch_to_device = 0;
  try {
    Loader loader(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("prefetch_to_device is 0"));
  }
  EXPECT_TRUE(descendants().empty());
}

TEST(DeviceParse, NamesEveryDevice) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::parse("emulated"), Device::emulated());
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_THROW(Device::parse("cuda:x"), Error);
}

// Without a GPU: the request is refused at construction, naming what is missing.
// With one: the same exact-contents check as the emulated device, on the real copy engine.
TEST(CudaDevice, DeliversExactContentsOrRefusesClearlyWithoutAGpu) {
  TempDir tmp;
  Schema schema = small_schema(300);
  write_lmdb(tmp.path("d.lmdb"), schema);
  Options o;
  o.source = tmp.path("d.lmdb");
  o.num_workers = 2;
  o.batch_size = 32;
  o.device = Device::cuda(0);
  std::unique_ptr<Loader> loader;
  try {
    loader = std::make_unique<Loader>(o);
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::device) << m;
    EXPECT_THAT(m, HasSubstr("device cuda"));
    EXPECT_TRUE(m.find("no NVIDIA driver") != std::string::npos || m.find("no CUDA device") != std::string::npos ||
                m.find("failed to initialise") != std::string::npos)
        << m;
    GTEST_SKIP() << "no GPU here: " << m;
  }
  auto backend = detail::make_device_backend(Device::cuda(0));
  for (Staging staging : {Staging::pinned_copy, Staging::registered_shm}) {
    o.staging = staging;
    loader = std::make_unique<Loader>(o);
    std::uint64_t samples = 0;
    for (Batch& b : loader->epoch(0)) {
      for (std::size_t f = 0; f < schema.fields.size(); ++f) {
        const FieldView& v = b.fields()[f];
        std::vector<std::byte> host(v.bytes);
        backend->synchronize(b.ready_event());
        backend->copy_to_host(host.data(), v.data, v.bytes);
        for (std::size_t k = 0; k < b.size(); ++k) {
          auto want = expected_field(schema.fields[f], b.indices()[k]);
          ASSERT_EQ(0, std::memcmp(host.data() + k * want.size(), want.data(), want.size()));
        }
      }
      samples += b.size();
    }
    EXPECT_EQ(samples, 300u);
  }
}

}  // namespace
}  // namespace stoker::test
