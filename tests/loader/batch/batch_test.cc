// loader/batch: a Batch returns its memory to its owner exactly once, whatever is done with it.
#include "stoker/batch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "loader/batch/batch_builder.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

using ::testing::HasSubstr;

class CountingOwner final : public BatchOwner {
 public:
  void release(std::uint32_t id) noexcept override { released.push_back(id); }
  std::vector<std::uint32_t> released;
};

struct OneBatch {
  std::shared_ptr<CountingOwner> owner = std::make_shared<CountingOwner>();
  std::vector<std::uint64_t> indices{4, 9};
  std::vector<std::int32_t> labels{40, 90};
  Batch make(std::uint32_t id) {
    BatchBuilder::Parts p;
    p.id = id;
    p.epoch = 3;
    p.index = 7;
    p.indices = indices;
    FieldView v;
    v.name = "label";
    v.dtype = DType::i32;
    v.shape = {2};
    v.data = reinterpret_cast<const std::byte*>(labels.data());
    v.bytes = labels.size() * sizeof(std::int32_t);
    p.fields.push_back(v);
    return BatchBuilder::make(owner, std::move(p));
  }
};

TEST(Batch, ReturnsItsMemoryOnceWhetherDestroyedMovedOrReleased) {
  OneBatch one;
  {
    Batch b = one.make(5);
    EXPECT_TRUE(b);
    EXPECT_EQ(b.epoch(), 3u);
    EXPECT_EQ(b.index(), 7u);
    EXPECT_EQ(b.size(), 2u);
    EXPECT_EQ(b["label"].as<std::int32_t>()[1], 90);
    Batch moved = std::move(b);
    EXPECT_FALSE(b);  // NOLINT(bugprone-use-after-move): a moved-from Batch is empty by contract
    EXPECT_TRUE(one.owner->released.empty());
  }
  EXPECT_EQ(one.owner->released, std::vector<std::uint32_t>{5});
  Batch c = one.make(6);
  c.release();
  c.release();
  EXPECT_FALSE(c);
  Batch d = one.make(8);
  d = one.make(9);  // the assigned-over batch returns its memory
  EXPECT_EQ(one.owner->released, (std::vector<std::uint32_t>{5, 6, 8}));
}

TEST(Batch, AMissingFieldIsNamedWithTheFieldsThereAre) {
  OneBatch one;
  Batch b = one.make(1);
  try {
    (void)b.field("image");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_STREQ(e.what(), "batch: no field 'image' (fields: label)");
  }
  b.release();
  EXPECT_THAT([&] { (void)b.field("label"); }, ::testing::Throws<Error>());
}

TEST(Batch, FieldsAreCopiedToTheHostFromTheirOwner) {
  OneBatch one;
  Batch b = one.make(2);
  std::int32_t out[2] = {};
  b.copy_field_to_host(0, out);
  EXPECT_EQ(out[0], 40);
  EXPECT_EQ(out[1], 90);
  try {
    b.copy_field_to_host(1, out);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option) << e.what();
    EXPECT_STREQ(e.what(), "batch: no field 1 (the batch has 1)");
  }
  b.release();
  try {
    b.copy_field_to_host(0, out);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_THAT(e.what(), HasSubstr("the batch is empty"));
  }
}

}  // namespace
}  // namespace stoker::detail
