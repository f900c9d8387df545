// Reader::metadata(): the text a dataset stores beside its samples, read from HDF5 attributes and
// an LMDB's `stoker` sub-database, within bounds a crafted file cannot lift.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "formats/core/reader.h"
#include "formats/hdf5/hdf5_reader.h"
#include "formats/lmdb/lmdb_reader.h"
#include "formats/sharded_reader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using Metadata = std::map<std::string, std::string>;
const std::string kLabels = R"({"label": ["cat", "dog"]})";

// A file with datasets at the root and in group "train", and attributes of every kind on both.
void write_attributed_hdf5(const std::string& path) {
  H5Builder b(path);
  const std::vector<std::int64_t> values{1, 2, 3, 4};
  b.array("x", H5T_STD_I64LE, {4}, values.data());
  b.group("train");
  b.array("train/y", H5T_STD_I64LE, {4}, values.data());
  b.text_attribute("/", "labels", kLabels);
  b.text_attribute("/", "note", "padded", H5Builder::Text::fixed, 3);  // "padded\0\0\0" as numpy's bytes_
  b.text_attribute("/", "split", "all");
  b.text_attribute("/", "latin1", "caf\xe9", H5Builder::Text::fixed);  // not UTF-8: left out
  b.number_attribute("/", "count", 4);                                 // not text: left out
  b.text_attribute("/train", "split", "train");                        // the group's wins
  b.text_attribute("/train", "origin", "camera 2");
}

TEST(Metadata, Hdf5TextAttributesOfTheRootAndThenOfTheFieldsGroup) {
  TempDir tmp;
  write_attributed_hdf5(tmp.path("a.h5"));
  formats::Hdf5Reader root(tmp.path("a.h5"), {"x"}, formats::Hdf5Path::automatic);
  EXPECT_EQ(root.metadata(), (Metadata{{"labels", kLabels}, {"note", "padded"}, {"split", "all"}}));
  formats::Hdf5Reader group(tmp.path("a.h5"), {}, formats::Hdf5Path::automatic, "train");
  EXPECT_EQ(group.metadata(),
            (Metadata{{"labels", kLabels}, {"note", "padded"}, {"split", "train"}, {"origin", "camera 2"}}));
}

TEST(Metadata, AnHdf5FileWithoutAttributesHasNone) {
  TempDir tmp;
  write_hdf5(tmp.path("d.h5"), small_schema(8), {});
  formats::Hdf5Reader r(tmp.path("d.h5"), {}, formats::Hdf5Path::automatic);
  EXPECT_EQ(r.metadata(), Metadata{});
}

TEST(Metadata, LmdbRecordsBesideTheSchemaButTheWritersPrivateOnes) {
  TempDir tmp;
  write_lmdb(tmp.path("d.lmdb"), small_schema(8));
  write_lmdb_meta_in_place(tmp.path("d.lmdb"), {{"labels", kLabels},
                                                {"progress", R"({"next_sample": 3})"},
                                                {"pack", R"({"done": 3})"},
                                                {"binary", std::string("\xff\x00\x01", 3)},
                                                {"split", "train"}});
  formats::LmdbReader r(tmp.path("d.lmdb"), {});
  EXPECT_EQ(r.metadata(), (Metadata{{"labels", kLabels}, {"split", "train"}}));
}

TEST(Metadata, AnLmdbWithoutAStokerSchemaHasNone) {
  TempDir tmp;
  std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>> records;
  for (char c : {'0', '1', '2'}) records.push_back({{std::byte(c)}, {std::byte{7}, std::byte{8}}});
  write_plain_lmdb(tmp.path("plain.lmdb"), records);
  formats::LmdbReader r(tmp.path("plain.lmdb"), {});
  EXPECT_EQ(r.metadata(), Metadata{});
}

TEST(Metadata, AShardSetHasItsFirstShards) {
  TempDir tmp;
  write_lmdb(tmp.path("s0.lmdb"), small_schema(5));
  write_lmdb(tmp.path("s1.lmdb"), small_schema(7));
  write_lmdb_meta_in_place(tmp.path("s0.lmdb"), {{"labels", kLabels}});
  write_lmdb_meta_in_place(tmp.path("s1.lmdb"), {{"labels", "other"}});
  formats::ShardedReader r({tmp.path("s0.lmdb"), tmp.path("s1.lmdb")}, formats::ReaderOptions{});
  EXPECT_EQ(r.metadata(), (Metadata{{"labels", kLabels}}));
}

TEST(Metadata, ABoundOfEntriesAndBytesWhateverTheFileHolds) {
  TempDir tmp;
  write_lmdb(tmp.path("many.lmdb"), small_schema(4));
  std::vector<std::pair<std::string, std::string>> many;
  for (int k = 0; k < 300; ++k) many.emplace_back(fmt::format("k{:03d}", k), "v");
  write_lmdb_meta_in_place(tmp.path("many.lmdb"), many);
  formats::LmdbReader r(tmp.path("many.lmdb"), {});
  const Metadata got = r.metadata();
  ASSERT_EQ(got.size(), formats::kMaxMetadataEntries);
  EXPECT_EQ(got.begin()->first, "k000");
  EXPECT_EQ(got.rbegin()->first, "k255") << "the first entries in key order are kept";

  // Bytes: names and values count; what would pass the bound is left out, a smaller one after it kept.
  formats::MetadataBounds bounds;
  Metadata out;
  const std::string mib(1u << 20, 'x');
  for (int k = 0; k < 16; ++k) bounds.add(out, fmt::format("m{:02d}", k), mib);
  EXPECT_EQ(out.size(), 15u) << "16 values of 1 MiB and their names are more than 16 MiB";
  bounds.add(out, "small", "fits");
  EXPECT_EQ(out.count("small"), 1u);
  bounds.add(out, "bad", "\xc3");  // a cut UTF-8 sequence
  EXPECT_EQ(out.count("bad"), 0u);
  // Counted as JSON writes it: 3 MiB of control characters are 18 MiB of \u00XX escapes.
  formats::MetadataBounds escaped;
  Metadata controls;
  escaped.add(controls, "controls", std::string(3u << 20, '\x01'));
  EXPECT_TRUE(controls.empty());
  escaped.add(controls, "quotes", std::string(4u << 20, '"'));  // 8 MiB escaped: fits
  EXPECT_EQ(controls.count("quotes"), 1u);
}

}  // namespace
}  // namespace stoker::test
