// formats/core: .npy headers read and written by one table of dtypes.
#include "formats/core/npy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "stoker/error.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

TEST(Npy, AWrittenHeaderReadsBackForEveryDtypeNumPyHas) {
  for (DType t : {DType::u8, DType::i8, DType::b8, DType::u16, DType::i16, DType::u32, DType::i32, DType::u64,
                  DType::i64, DType::f16, DType::f32, DType::f64}) {
    const std::int64_t shape[] = {2, 3, 5};
    const std::string h = formats::npy_header(t, shape);
    const formats::NpyHeader back = formats::parse_npy_header(bytes_of(h + std::string(30 * dtype_size(t), 'x')));
    EXPECT_EQ(back.dtype, t) << dtype_name(t);
    EXPECT_EQ(back.shape, (std::vector<std::int64_t>{2, 3, 5}));
    EXPECT_EQ(back.header_bytes, h.size());
    EXPECT_EQ(h.size() % 64, 0u) << "the data starts aligned";
    EXPECT_EQ(back.data_bytes, 30 * dtype_size(t));
  }
}

TEST(Npy, WriteNpyWritesHeaderThenData) {
  TempDir tmp;
  const std::vector<std::int32_t> v{1, -2, 3};
  const std::int64_t shape[] = {3};
  formats::write_npy(tmp.path("a.npy"), DType::i32, shape, v.data(), v.size() * 4);
  std::ifstream in(tmp.path("a.npy"), std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const formats::NpyHeader h = formats::parse_npy_header(bytes_of(file));
  ASSERT_EQ(file.size(), h.header_bytes + 12);
  EXPECT_EQ(std::memcmp(file.data() + h.header_bytes, v.data(), 12), 0);
  EXPECT_THAT(file, ::testing::HasSubstr("'descr': '<i4'"));
  try {
    formats::write_npy(tmp.path("no/such/dir/a.npy"), DType::i32, shape, v.data(), 12);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
  }
}

}  // namespace
}  // namespace stoker::test
