// loader/pipeline: a pipeline's text parsed, bound to a schema and run on samples, without a Loader.
#include "loader/pipeline/pipeline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "stoker/error.h"

namespace stoker::detail {
namespace {

using ::testing::HasSubstr;

Schema image_and_label() {
  Schema s;
  s.num_samples = 10;
  s.fields = {{"image", FieldKind::fixed, DType::u8, {4, 4, 3}}, {"label", FieldKind::fixed, DType::i64, {}}};
  return s;
}

TEST(PipelineText, ParsesFieldsOperationsAndArguments) {
  const auto p = parse_pipeline(" image = center_crop(2, 3) ,flip ; label=x(1.5,-2)");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].field, "image");
  ASSERT_EQ(p[0].ops.size(), 2u);
  EXPECT_EQ(p[0].ops[0].name, "center_crop");
  EXPECT_EQ(p[0].ops[0].args, (std::vector<double>{2, 3}));
  EXPECT_EQ(p[0].ops[1].name, "flip");
  EXPECT_EQ(p[1].ops[0].args, (std::vector<double>{1.5, -2}));
  for (const char* bad : {"image", "=flip", "image=flip;image=flip", "image=crop(1", "image=crop(x)"}) {
    try {
      (void)parse_pipeline(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option) << bad;
    }
  }
}

TEST(SamplePipelines, BindToTheSchemaAndReplaceTheirFieldsOutput) {
  const SamplePipelines none;
  EXPECT_TRUE(none.empty());
  SamplePipelines p("image=center_crop(2),to_chw", image_and_label(), 7, {});
  EXPECT_FALSE(p.empty());
  EXPECT_TRUE(p.transforms(0));
  EXPECT_FALSE(p.transforms(1));
  EXPECT_EQ(p.output().describe_fields(), "image: u8[3,2,2], label: i64[]");
  EXPECT_EQ(p.describe(), "image=center_crop(2),to_chw");
  // The middle 2x2 of a 4x4 image, planes out: pixel (y, x) channel c holds 16y + 4x + c.
  std::vector<std::byte> in(48), out(12);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) {
      for (int c = 0; c < 3; ++c) in[static_cast<std::size_t>((y * 4 + x) * 3 + c)] = std::byte(16 * y + 4 * x + c);
    }
  }
  p.run(0, in, 0, 3, out.data());
  std::vector<std::byte> want;
  for (int c = 0; c < 3; ++c) {
    for (int y = 1; y < 3; ++y) {
      for (int x = 1; x < 3; ++x) want.push_back(std::byte(16 * y + 4 * x + c));
    }
  }
  EXPECT_EQ(out, want);
}

TEST(SamplePipelines, AnOperationThatCannotTakeItsInputIsAnOptionError) {
  try {
    SamplePipelines p("label=resize(2,2)", image_and_label(), 0, {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_option);
    EXPECT_THAT(e.what(), HasSubstr("pipeline: field 'label', operation 1: 'resize(2,2)' needs an image"));
  }
}

}  // namespace
}  // namespace stoker::detail
