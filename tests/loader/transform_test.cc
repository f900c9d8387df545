// Options::transform (stoker/transform.h): a C++ transform run without workers, in workers forked
// from this process (the fork-only path), and in workers of a host that rebuilds it from its
// payload: this test program started with kTransformHostFlag (tests/support/main.cc).
#include "stoker/transform.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "stoker/init.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"
#include "tests/support/test_transform.h"

namespace stoker::test {
namespace {

class Transforms : public ::testing::Test {
 protected:
  void SetUp() override {
    write_hdf5(tmp_.path("d.h5"), small_schema(kSamples), {formats::Hdf5WriteOptions::Layout::chunked, 8, 0});
  }

  Options options(std::size_t workers, std::int64_t factor = 1) const {
    Options o;
    o.source = tmp_.path("d.h5");
    o.batch_size = 6;
    o.num_workers = workers;
    o.shuffle = true;
    o.seed = 3;
    o.transform.fields = twice_and_ids_fields();
    o.transform.local = twice_and_ids(factor);
    return o;
  }

  // Every sample once, each as the transform makes it with `factor`.
  static void expect_transformed(Loader& loader, std::int64_t factor) {
    const Field label = small_schema(kSamples).fields[1];
    std::vector<int> seen(kSamples, 0);
    Epoch e = loader.epoch(1);
    while (auto b = e.next()) {
      const FieldView& twice = b->field("twice");
      const FieldView& ids = b->field("ids");
      ASSERT_EQ(ids.kind, FieldKind::bytes);
      for (std::size_t k = 0; k < b->size(); ++k) {
        const std::uint64_t i = b->indices()[k];
        std::int64_t want = 0, got = 0;
        std::memcpy(&want, expected_field(label, i).data(), 8);
        std::memcpy(&got, static_cast<const std::byte*>(twice.data) + 8 * k, 8);
        EXPECT_EQ(got,
                  static_cast<std::int64_t>(static_cast<std::uint64_t>(want) * 2u * static_cast<std::uint64_t>(factor)))
            << i;
        ASSERT_EQ(ids.offsets[k + 1] - ids.offsets[k], 4 * (i % 5)) << i;
        for (std::uint64_t n = 0; n < i % 5; ++n) {
          std::int32_t id = 0;
          std::memcpy(&id, static_cast<const std::byte*>(ids.data) + ids.offsets[k] + 4 * n, 4);
          EXPECT_EQ(id, static_cast<std::int32_t>(i));
        }
        ++seen[i];
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1);
  }

  static constexpr std::uint64_t kSamples = 40;
  TempDir tmp_;
};

TEST_F(Transforms, WithoutWorkersTheTransformRunsHere) {
  Loader loader(options(0));
  ASSERT_EQ(loader.schema().fields.size(), 2u);
  EXPECT_EQ(loader.schema().fields[0].describe(), "twice: i64[]");
  EXPECT_EQ(loader.schema().fields[1].describe(), "ids: bytes");
  expect_transformed(loader, 1);
}

TEST_F(Transforms, WorkersOfAHostRunTheTransformItRebuiltFromThePayload) {
  Options o = options(2);
  o.transform.host = {"/proc/self/exe", kTransformHostFlag};
  o.transform.payload = "5";  // the host's transform: factor 5, where this process's has 1
  Loader loader(o);
  expect_transformed(loader, 5);
}

TEST_F(Transforms, WorkersStartedByExecNeedAHost) {
  if (!clean_workers()) {  // the fork-only path: the workers have this process's transform
    Loader loader(options(2));
    expect_transformed(loader, 1);
    return;
  }
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(options(2)); }, {"Options::transform.host"});
}

TEST_F(Transforms, AnErrorNamesTheSample) {
  for (const std::size_t workers : {0, 2}) {
    Options o = options(workers, 7);
    o.transform.host = {"/proc/self/exe", kTransformHostFlag};
    o.transform.payload = "7";
    Loader loader(o);
    Epoch e = loader.epoch(0);
    expect_error(ErrorCode::transform,
                 [&] {
                   while (e.next()) {
                   }
                 },
                 {"d.h5: sample 13: thirteen", "epoch 0"});
  }
}

TEST_F(Transforms, FieldsARingCannotHoldAreRefused) {
  Options o = options(0);
  o.transform.fields[1].max_sample_bytes = 0;
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(o); }, {"ragged field 'ids' has no max_sample_bytes"});
  o = options(0);
  o.transform.fields.push_back(o.transform.fields[0]);
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(o); }, {"field 'twice' is declared twice"});
  o = options(0);
  o.transform.local.reset();
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(o); }, {"neither a local transform nor a host"});
  o.transform.host = {"/proc/self/exe", kTransformHostFlag};
  expect_error(ErrorCode::invalid_option, [&] { Loader loader(o); },
               {"without workers the transform runs in this process", "Options::transform.local"});
}

}  // namespace
}  // namespace stoker::test
