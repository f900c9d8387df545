// LMDB databases whose sample is one key per field (Options::lmdb_keys), as the widely copied
// text-recognition scripts write them: image-000000001, label-000000001, ..., num-samples.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "formats/lmdb/lmdb_key_templates.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker {
namespace {

using test::expect_error;
using test::TempDir;
using test::write_plain_lmdb;
using ::testing::HasSubstr;

using Bytes = std::vector<std::byte>;
using Records = std::vector<std::pair<Bytes, Bytes>>;

Bytes text(const std::string& s) {
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

// Sample i's image: bytes whose length and content are functions of i.
Bytes image(std::uint64_t i) {
  Bytes b(20 + (i * 31) % 200);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((i * 3 + k * 17) & 0xff);
  return b;
}
std::string word(std::uint64_t i) { return fmt::format("word{}", i * i); }

// As create_lmdb_dataset.py writes: keys from index 1, the count under num-samples.
Records crnn_style(std::uint64_t n) {
  Records r;
  for (std::uint64_t i = 0; i < n; ++i) {
    r.emplace_back(text(fmt::format("image-{:09d}", i + 1)), image(i));
    r.emplace_back(text(fmt::format("label-{:09d}", i + 1)), text(word(i)));
  }
  r.emplace_back(text("num-samples"), text(std::to_string(n)));
  return r;
}

// Every delivered sample's fields, by sample index.
std::map<std::uint64_t, std::pair<Bytes, Bytes>> load(const Options& o) {
  Loader loader(o);
  std::map<std::uint64_t, std::pair<Bytes, Bytes>> out;
  for (Batch& b : loader.epoch(0)) {
    const FieldView& img = b.field("image");
    const FieldView& lbl = b.field("label");
    for (std::size_t k = 0; k < b.size(); ++k) {
      const auto x = img.sample(k), y = lbl.sample(k);
      EXPECT_TRUE(out.emplace(b.indices()[k], std::pair{Bytes(x.begin(), x.end()), Bytes(y.begin(), y.end())}).second);
    }
  }
  return out;
}

TEST(PairedKeys, ACrnnStyleDatabaseDeliversEverySampleWithItsLabelWithAnyWorkers) {
  TempDir tmp;
  const std::string p = tmp.path("text.lmdb");
  const std::uint64_t n = 57;
  write_plain_lmdb(p, crnn_style(n));
  for (std::size_t workers : {0u, 2u}) {
    Options o;
    o.source = p;
    o.lmdb_keys = "image=image-{:09d},label=label-{:09d}";
    o.lmdb_count_key = "num-samples";
    o.batch_size = 8;
    o.num_workers = workers;
    o.shuffle = true;
    {
      Loader probe(o);
      EXPECT_EQ(probe.schema().describe_fields(), "image: bytes, label: bytes");
      EXPECT_EQ(probe.schema().num_samples, n);
      EXPECT_THAT(probe.describe_source(), HasSubstr("one key per field from index 1"));
    }
    const auto got = load(o);
    ASSERT_EQ(got.size(), n) << workers << " workers";
    for (const auto& [i, s] : got) {
      EXPECT_EQ(s.first, image(i)) << "sample " << i;
      EXPECT_EQ(s.second, text(word(i))) << "sample " << i;
    }
  }
}

TEST(PairedKeys, ANumberTypedKeyIsDeliveredAsThatType) {
  TempDir tmp;
  const std::string p = tmp.path("n.lmdb");
  Records r;
  const std::uint64_t n = 30;
  for (std::uint64_t i = 0; i < n; ++i) {
    r.emplace_back(text(fmt::format("img{}", i)), image(i));
    r.emplace_back(text(fmt::format("cls{}", i)), text(fmt::format(" {}\n", static_cast<std::int64_t>(i) - 7)));
    r.emplace_back(text(fmt::format("w{}", i)), text(fmt::format("{}", 0.25 * static_cast<double>(i))));
  }
  write_plain_lmdb(p, r);
  Options o;
  o.source = p;
  o.lmdb_keys = "image=img{},cls=cls{}:i64,w=w{}:f32";
  o.batch_size = 7;
  o.num_workers = 2;
  Loader loader(o);
  EXPECT_EQ(loader.schema().describe_fields(), "cls: i64[], image: bytes, w: f32[]");
  std::uint64_t seen = 0;
  for (Batch& b : loader.epoch(0)) {
    const auto cls = b.field("cls").as<std::int64_t>();
    const auto w = b.field("w").as<float>();
    for (std::size_t k = 0; k < b.size(); ++k) {
      const std::uint64_t i = b.indices()[k];
      EXPECT_EQ(cls[k], static_cast<std::int64_t>(i) - 7);
      EXPECT_EQ(w[k], 0.25f * static_cast<float>(i));
      ++seen;
    }
  }
  EXPECT_EQ(seen, n);
}

TEST(PairedKeys, MissingKeysWrongCountsAndBadTemplatesAreNamed) {
  TempDir tmp;
  Options o;
  o.lmdb_keys = "image=image-{:09d},label=label-{:09d}";
  o.num_workers = 1;
  // A label missing: the key is named, found when the loader is built.
  Records r = crnn_style(10);
  r.erase(r.begin() + 7);  // label-000000004
  const std::string gap = tmp.path("gap.lmdb");
  write_plain_lmdb(gap, r);
  o.source = gap;
  expect_error(ErrorCode::dataset, [&] { Loader l(o); },
               {"gap.lmdb: sample 3 field 'label': key b'label-000000004' is missing"});
  // The count key disagrees with the keys.
  r = crnn_style(10);
  r.back().second = text("12");
  const std::string wrong = tmp.path("wrong.lmdb");
  write_plain_lmdb(wrong, r);
  o.source = wrong;
  o.lmdb_count_key = "num-samples";
  expect_error(ErrorCode::dataset, [&] { Loader l(o); },
               {"key 'num-samples' holds b'12', but the keys of image-{:09d} make 10 samples"});
  // Neither index 0 nor 1.
  o.lmdb_keys = "image=img-{:09d},label=label-{:09d}";
  expect_error(ErrorCode::dataset, [&] { Loader l(o); }, {"has neither key b'img-000000000' nor b'img-000000001'"});
  // A template that is not one.
  o.lmdb_keys = "image=image-{:9d}";
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); },
               {"lmdb_keys: 'image=image-{:9d}' has placeholder {:9d}: {} or {:0Nd}"});
  o.lmdb_keys = "image=image-{:09d}:float";
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); }, {"has type 'float': bytes or a number type"});
  // A text that is not the declared number: named at the read, with its key and value.
  o.lmdb_keys = "image=image-{:09d},label=label-{:09d}:i32";
  o.lmdb_count_key.clear();
  o.source = tmp.path("text.lmdb");
  write_plain_lmdb(o.source, crnn_style(5));
  o.batch_size = 5;
  expect_error(ErrorCode::dataset,
               [&] {
                 Loader l(o);
                 for (Batch& b : l.epoch(0)) (void)b;
               },
               {"field 'label': key b'label-000000001' holds b'word0', not an i32 number"});
}

TEST(PairedKeys, TemplatesSpellAndReadEachIndexOneWay) {
  const auto t = formats::parse_key_templates("a=x-{:04d}.jpg,b=y{}:u16");
  ASSERT_EQ(t.size(), 2u);
  char buf[64];
  EXPECT_EQ(std::string(buf, t[0].key(7, buf)), "x-0007.jpg");
  EXPECT_EQ(std::string(buf, t[0].key(123456, buf)), "x-123456.jpg");
  EXPECT_EQ(std::string(buf, t[1].key(0, buf)), "y0");
  EXPECT_EQ(t[0].parse("x-0007.jpg"), 7u);
  EXPECT_EQ(t[0].parse("x-123456.jpg"), 123456u);
  EXPECT_EQ(t[0].parse("x-007.jpg"), std::nullopt);
  EXPECT_EQ(t[0].parse("x-00007.jpg"), std::nullopt);
  EXPECT_EQ(t[1].parse("y07"), std::nullopt);
  EXPECT_EQ(t[1].parse("y"), std::nullopt);
  EXPECT_TRUE(t[0].bytes);
  EXPECT_EQ(t[1].dtype, DType::u16);
  expect_error(ErrorCode::invalid_option, [] { formats::parse_key_templates("a=x{},a=y{}"); },
               {"names field 'a' twice"});
  expect_error(ErrorCode::invalid_option, [] { formats::parse_key_templates("a=x"); },
               {"needs exactly one index placeholder"});
  // Spaces around names and templates are the spelling's.
  const auto spaced = formats::parse_key_templates(" image = image-{:09d} , label = label-{:09d}:i64");
  ASSERT_EQ(spaced.size(), 2u);
  EXPECT_EQ(spaced[0].field, "image");
  EXPECT_EQ(std::string(buf, spaced[1].key(3, buf)), "label-000000003");
  EXPECT_EQ(spaced[1].dtype, DType::i64);
}

// A label's text is a number as Python's int() and float() read it: one sign at most.
TEST(PairedKeys, ANumberValueTakesOneSignAtMost) {
  const auto parse = [](std::string_view text, DType t) {
    std::byte out[8];
    return formats::parse_number_value(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(text.data()), text.size()), t, out);
  };
  EXPECT_TRUE(parse("-5", DType::i32));
  EXPECT_TRUE(parse("+5", DType::i32));
  EXPECT_TRUE(parse("+1.5", DType::f32));
  EXPECT_FALSE(parse("+-5", DType::i32));
  EXPECT_FALSE(parse("++5", DType::i64));
  EXPECT_FALSE(parse("+-1.5", DType::f64));
  EXPECT_FALSE(parse("+", DType::i32));
  EXPECT_FALSE(parse("-5", DType::u8));
}

}  // namespace
}  // namespace stoker
