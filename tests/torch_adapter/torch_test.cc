#include "stoker/torch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstring>

#include "formats/lmdb/lmdb_writer.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

void expect_tensor_matches(const torch::Tensor& t, const Field& field, std::span<const std::uint64_t> indices) {
  ASSERT_EQ(t.scalar_type(), torch_dtype(field.dtype));
  std::vector<std::int64_t> shape{static_cast<std::int64_t>(indices.size())};
  shape.insert(shape.end(), field.shape.begin(), field.shape.end());
  ASSERT_EQ(t.sizes().vec(), shape);
  torch::Tensor c = t.cpu().contiguous();
  const auto* bytes = static_cast<const std::byte*>(c.data_ptr());
  for (std::size_t k = 0; k < indices.size(); ++k) {
    auto want = expected_field(field, indices[k]);
    ASSERT_EQ(0, std::memcmp(bytes + k * want.size(), want.data(), want.size())) << field.name << " " << indices[k];
  }
}

class TorchAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = all_dtypes_schema(90);
    write_lmdb(tmp_.path("d.lmdb"), schema_);
  }
  Options options() {
    Options o;
    o.source = tmp_.path("d.lmdb");
    o.batch_size = 16;
    return o;
  }
  TempDir tmp_;
  Schema schema_;
};

TEST_F(TorchAdapter, TensorsEqualTheSourceDataForEveryDtype) {
  for (std::size_t workers : {0, 2}) {
    Options o = options();
    o.num_workers = workers;
    o.shuffle = true;
    Loader loader(o);
    for (Batch& b : loader.epoch(0)) {
      std::vector<std::uint64_t> idx(b.indices().begin(), b.indices().end());
      TensorMap t = to_tensors(std::move(b));
      ASSERT_EQ(t.size(), schema_.fields.size());
      for (const Field& f : schema_.fields) {
        EXPECT_TRUE(t[f.name].device().is_cpu());
        expect_tensor_matches(t[f.name], f, idx);
      }
    }
  }
}

TEST_F(TorchAdapter, ZeroCopyTensorsKeepTheirBatchUntilTheLastIsFreed) {
  Options o = options();
  o.prefetch = 1;  // one slot: whether it is free shows whether the batch was released
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  std::vector<std::uint64_t> idx;
  torch::Tensor survivor;
  {
    auto b = epoch.next();
    idx.assign(b->indices().begin(), b->indices().end());
    const void* in_slot = (*b)["a_u8"].data;  // the batch's memory in the shared-memory slot
    TensorMap t = to_tensors(std::move(*b));
    EXPECT_FALSE(*b);
    EXPECT_EQ(t["a_u8"].data_ptr(), in_slot) << "to_tensors copied instead of aliasing the slot";
    survivor = t["h_f32"];              // outlives the map and the loop iteration
    EXPECT_THROW(epoch.next(), Error);  // the slot is still held by the tensors
  }
  EXPECT_THROW(epoch.next(), Error);  // ... and by the survivor alone
  expect_tensor_matches(survivor, schema_.fields[7], idx);
  survivor = torch::Tensor();  // the last reference: the deleter releases the batch, once
  auto next = epoch.next();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->index(), 1u);
}

TEST_F(TorchAdapter, TheCopyingVariantReleasesTheSlotAtOnce) {
  Options o = options();
  o.prefetch = 1;
  Loader loader(o);
  Epoch epoch = loader.epoch(0);
  std::vector<TensorMap> kept;
  std::vector<std::vector<std::uint64_t>> kept_idx;
  while (auto b = epoch.next()) {
    kept_idx.emplace_back(b->indices().begin(), b->indices().end());
    kept.push_back(copy_to_tensors(std::move(*b)));  // one slot, yet every batch can be kept
  }
  ASSERT_EQ(kept.size(), 6u);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    for (const Field& f : schema_.fields) expect_tensor_matches(kept[i][f.name], f, kept_idx[i]);
  }
}

TEST_F(TorchAdapter, EmulatedDeviceBatchesBecomeReadyCpuTensors) {
  Options o = options();
  o.num_workers = 1;
  o.device = Device::emulated();
  Loader loader(o);
  std::uint64_t samples = 0;
  for (Batch& b : loader.epoch(0)) {
    std::vector<std::uint64_t> idx(b.indices().begin(), b.indices().end());
    TensorMap t = to_tensors(std::move(b));
    for (const Field& f : schema_.fields) expect_tensor_matches(t[f.name], f, idx);
    samples += idx.size();
  }
  EXPECT_EQ(samples, 90u);
}

TEST_F(TorchAdapter, CudaTensorsEqualTheSourceWhereThereIsAGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "torch sees no CUDA device here";
  Options o = options();
  o.num_workers = 2;
  o.device = Device::cuda(0);
  Loader loader(o);
  for (Batch& b : loader.epoch(0)) {
    std::vector<std::uint64_t> idx(b.indices().begin(), b.indices().end());
    TensorMap t = to_tensors(std::move(b));
    for (const Field& f : schema_.fields) {
      EXPECT_TRUE(t[f.name].is_cuda());
      expect_tensor_matches(t[f.name], f, idx);  // .cpu() runs on the current stream, after the wait
    }
  }
}

TEST(TorchAdapterErrors, AnEmptyBatchIsAClearError) {
  Batch empty;
  try {
    to_tensors(std::move(empty));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("the batch is empty"));
  }
}

}  // namespace
}  // namespace stoker::test

namespace stoker::test {
namespace {

// Sample i of the bytes field: (i * 29) % 50 elements of `element` bytes, byte k being (i + k) mod 256.
std::vector<std::byte> blob(std::uint64_t i, std::size_t element) {
  std::vector<std::byte> b((i * 29) % 50 * element);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((i + k) & 0xff);
  return b;
}

class TorchAdapterBytes : public ::testing::TestWithParam<DType> {};

// A bytes field of bytes, or of i32 values (h5py's vlen int32, kept through LMDB's schema): a flat
// tensor of its dtype, offsets counting its elements.
TEST_P(TorchAdapterBytes, ABytesFieldIsAFlatTensorWithOffsetsAndSplitsIntoSamples) {
  const DType dtype = GetParam();
  const std::size_t element = dtype_size(dtype);
  TempDir tmp;
  const std::string p = tmp.path("v.lmdb");
  Schema schema;
  schema.num_samples = 40;
  schema.fields = {Field::bytes_field("blob", dtype)};
  {
    formats::LmdbWriter w(p, schema, {});
    for (std::uint64_t i = 0; i < 40; ++i) {
      const auto b = blob(i, element);
      const std::span<const std::byte> parts[1] = {b};
      w.append_sample(parts);
    }
    w.finish("0000000000000000");
  }
  for (bool copy : {false, true}) {
    Options o;
    o.source = p;
    o.batch_size = 9;
    o.num_workers = 2;
    o.shuffle = true;
    Loader loader(o);
    std::uint64_t seen = 0;
    for (Batch& b : loader.epoch(0)) {
      std::vector<std::uint64_t> idx(b.indices().begin(), b.indices().end());
      TensorMap t = copy ? copy_to_tensors(std::move(b)) : to_tensors(std::move(b));
      ASSERT_EQ(t["blob"].scalar_type(), torch_dtype(dtype));
      ASSERT_EQ(t["blob.offsets"].scalar_type(), torch::kInt64);
      ASSERT_EQ(t["blob.offsets"].numel(), static_cast<std::int64_t>(idx.size() + 1));
      const auto samples = split_bytes(t["blob"], t["blob.offsets"]);
      ASSERT_EQ(samples.size(), idx.size());
      for (std::size_t k = 0; k < idx.size(); ++k) {
        const auto want = blob(idx[k], element);
        ASSERT_EQ(samples[k].numel(), static_cast<std::int64_t>(want.size() / element));
        if (!want.empty()) {
          EXPECT_EQ(0, std::memcmp(samples[k].data_ptr(), want.data(), want.size()));
        }
        ++seen;
      }
    }
    EXPECT_EQ(seen, 40u);
  }
}

INSTANTIATE_TEST_SUITE_P(Elements, TorchAdapterBytes, ::testing::Values(DType::u8, DType::i32),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

TEST(TorchAdapterSplitBytes, OffsetsOutsideTheValuesAreAnError) {
  EXPECT_THAT(
      [] {
        try {
          split_bytes(torch::zeros({4}, torch::kUInt8), torch::tensor({0, 3, 9}, torch::kInt64));
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::invalid_option) << e.what();
          return std::string(e.what());
        }
        return std::string("no error");
      }(),
      HasSubstr("offsets 3 .. 9 of sample 1 are not within the 4 values"));
}

}  // namespace
}  // namespace stoker::test
