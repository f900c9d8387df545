// Batches too large for their slot (docs/shm-layout.md, "Bytes fields"): read again outside the
// ring, and delivered exactly as a batch that fits, whatever fields sit beside the bytes.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/posix_error.h"
#include "formats/lmdb/lmdb_writer.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"
#include "tests/support/test_images.h"

namespace stoker {
namespace {

using test::TempDir;
using ::testing::HasSubstr;

using Bytes = std::vector<std::byte>;

// 91 samples: the loader sizes slots from 16 samples spread over the dataset, here samples 0, 6,
// 12, ... 90, all small; the outliers are odd-numbered, so none of them is looked at.
constexpr std::uint64_t kSamples = 91;

Bytes pattern(std::size_t n, std::uint64_t seed) {
  Bytes b(n);
  for (std::size_t k = 0; k < n; ++k) b[k] = static_cast<std::byte>((seed * 31 + k * 7 + k / 251) & 0xff);
  return b;
}

// The bytes fields: "a_tag" before every fixed field, "c_blob" between two, "g_group" (an HDF5
// sample group) after them. With `outliers`, some samples are far larger than those looked at.
Bytes tag(std::uint64_t i, bool outliers) { return pattern(outliers && i % 12 == 7 ? 40000 + i : (i * 7) % 50, i); }
Bytes blob(std::uint64_t i, bool outliers) {
  return pattern(outliers && i % 24 == 13 ? 50000 + i : (i * 37) % 300, i + 1000);
}
Bytes group_member(std::uint64_t i, bool outliers) { return pattern(outliers && i == 45 ? 70000 : i % 9 + 1, i + 7); }

// An RGB PNG of a size that varies with i: "e_png" is decoded and resized by a pipeline into a
// fixed field.
Bytes png(std::uint64_t i) {
  const int h = 5 + static_cast<int>(i % 4), w = 6 + static_cast<int>(i % 3);
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  for (std::size_t k = 0; k < rgb.size(); ++k) rgb[k] = static_cast<std::uint8_t>((i * 13 + k * 5) & 0xff);
  return test::encode_png(rgb, h, w);
}

// The fixed fields, of assorted dtypes and shapes; "h_pixels" goes through a pipeline (a fixed
// input), "b_label", "d_weight" and "f_code" are delivered as stored.
std::int64_t label(std::uint64_t i) { return static_cast<std::int64_t>(i) * 3 - 100; }
std::vector<float> weight(std::uint64_t i) {
  std::vector<float> w(6);
  for (std::size_t k = 0; k < w.size(); ++k) w[k] = static_cast<float>(i) * 0.5f + static_cast<float>(k);
  return w;
}
std::vector<std::int16_t> code(std::uint64_t i) {
  return {static_cast<std::int16_t>(-i), static_cast<std::int16_t>(i * 2)};
}
Bytes pixels(std::uint64_t i) { return pattern(4 * 6 * 3, i + 5000); }

const char* const kPipeline = "e_png=decode,resize(4,5);h_pixels=flip";

template <class T>
std::span<const std::byte> raw(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

std::string write_hdf5(const TempDir& tmp, bool outliers) {
  const std::string p = tmp.path(outliers ? "mixed.h5" : "mixed-small.h5");
  std::vector<Bytes> tags, blobs, members, pngs;
  std::vector<std::int64_t> labels;
  std::vector<float> weights;
  std::vector<std::int16_t> codes;
  Bytes pix;
  for (std::uint64_t i = 0; i < kSamples; ++i) {
    tags.push_back(tag(i, outliers));
    blobs.push_back(blob(i, outliers));
    members.push_back(group_member(i, outliers));
    pngs.push_back(png(i));
    labels.push_back(label(i));
    for (float w : weight(i)) weights.push_back(w);
    for (std::int16_t c : code(i)) codes.push_back(c);
    for (std::byte b : pixels(i)) pix.push_back(b);
  }
  test::H5Builder f(p);
  f.vlen("a_tag", tags);
  f.array("b_label", H5T_NATIVE_INT64, {kSamples}, labels.data());
  f.vlen("c_blob", blobs);
  f.array("d_weight", H5T_NATIVE_FLOAT, {kSamples, 3, 2}, weights.data());
  f.vlen("e_png", pngs);
  f.array("f_code", H5T_NATIVE_INT16, {kSamples, 2}, codes.data());
  f.members("g_group", members);
  f.array("h_pixels", H5T_NATIVE_UINT8, {kSamples, 4, 6, 3}, pix.data());
  return p;
}

// The same samples in stoker's LMDB layout, whose exact bound on a bytes field does not keep a
// batch of outliers from outgrowing a slot sized from typical samples.
std::string write_lmdb(const TempDir& tmp, bool outliers) {
  const std::string p = tmp.path(outliers ? "mixed.lmdb" : "mixed-small.lmdb");
  Schema schema;
  schema.num_samples = kSamples;
  schema.fields = {Field::bytes_field("a_tag"),   Field{"b_label", FieldKind::fixed, DType::i64, {}},
                   Field::bytes_field("c_blob"),  Field{"d_weight", FieldKind::fixed, DType::f32, {3, 2}},
                   Field::bytes_field("e_png"),   Field{"f_code", FieldKind::fixed, DType::i16, {2}},
                   Field::bytes_field("g_group"), Field{"h_pixels", FieldKind::fixed, DType::u8, {4, 6, 3}}};
  formats::LmdbWriter w(p, schema, {});
  for (std::uint64_t i = 0; i < kSamples; ++i) {
    const Bytes a = tag(i, outliers), c = blob(i, outliers), e = png(i), g = group_member(i, outliers), h = pixels(i);
    const std::int64_t b = label(i);
    const std::vector<float> d = weight(i);
    const std::vector<std::int16_t> f = code(i);
    const std::span<const std::byte> parts[8] = {a, std::as_bytes(std::span(&b, 1)), c, raw(d), e, raw(f), g, h};
    w.append_sample(parts);
  }
  w.finish("0000000000000000");
  return p;
}

// A delivered batch, copied: its indices and each field's bytes (and offsets, for bytes fields).
struct Copied {
  std::vector<std::uint64_t> indices;
  std::map<std::string, Bytes> data;
  std::map<std::string, std::vector<std::uint64_t>> offsets;
  bool operator==(const Copied&) const = default;
};

struct Epochs {
  std::vector<Copied> batches;  // epochs 0 and 1, in order
  std::uint64_t overflow_batches = 0;
};

Epochs load(const std::string& path, std::size_t workers) {
  Options o;
  o.source = path;
  o.batch_size = 8;
  o.num_workers = workers;
  o.shuffle = true;
  o.seed = 11;
  o.pipeline = kPipeline;
  o.on_warning = [](std::string_view) {};
  Loader loader(o);
  Epochs out;
  for (std::uint64_t epoch : {0, 1}) {
    for (Batch& b : loader.epoch(epoch)) {
      Copied c;
      c.indices.assign(b.indices().begin(), b.indices().end());
      for (const FieldView& f : b.fields()) {
        c.data[std::string(f.name)] = Bytes(f.data, f.data + f.bytes);
        if (f.kind == FieldKind::bytes) c.offsets[std::string(f.name)].assign(f.offsets.begin(), f.offsets.end());
      }
      out.batches.push_back(std::move(c));
    }
  }
  out.overflow_batches = loader.stats().overflow_batches;
  return out;
}

// Sample k of a copied bytes field.
Bytes sample_of(const Copied& c, const std::string& field, std::size_t k) {
  const std::vector<std::uint64_t>& o = c.offsets.at(field);
  const Bytes& d = c.data.at(field);
  return Bytes(d.begin() + static_cast<std::ptrdiff_t>(o[k]), d.begin() + static_cast<std::ptrdiff_t>(o[k + 1]));
}

// Every field kind at once, bytes fields before, between and after fixed ones, pipelines from bytes
// and from a fixed field: each batch that outgrows its slot (several do, for every bytes field)
// arrives, with workers and without, holding exactly what a run where nothing overflows delivers,
// in the same order, and each bytes sample exactly as written.
void expect_overflow_changes_nothing(const std::string& outliers, const std::string& small) {
  const Epochs reference = load(small, 2);
  ASSERT_EQ(reference.overflow_batches, 0u) << "the reference run must not overflow";
  ASSERT_EQ(reference.batches.size(), 24u);
  std::map<std::size_t, Epochs> runs;
  for (std::size_t workers : {0u, 2u}) {
    SCOPED_TRACE(fmt::format("{} workers", workers));
    const Epochs got = load(outliers, workers);
    EXPECT_GE(got.overflow_batches, 8u);
    EXPECT_LT(got.overflow_batches, got.batches.size());
    ASSERT_EQ(got.batches.size(), reference.batches.size());
    for (std::size_t b = 0; b < got.batches.size(); ++b) {
      const Copied& g = got.batches[b];
      const Copied& r = reference.batches[b];
      ASSERT_EQ(g.indices, r.indices) << "batch " << b;
      for (const char* fixed : {"b_label", "d_weight", "e_png", "f_code", "h_pixels"}) {
        EXPECT_EQ(g.data.at(fixed), r.data.at(fixed)) << "batch " << b << ", field " << fixed;
      }
      EXPECT_FALSE(g.offsets.contains("e_png")) << "a pipeline's output is a fixed field";
      for (std::size_t k = 0; k < g.indices.size(); ++k) {
        const std::uint64_t i = g.indices[k];
        EXPECT_EQ(sample_of(g, "a_tag", k), tag(i, true)) << "batch " << b << ", sample " << i;
        EXPECT_EQ(sample_of(g, "c_blob", k), blob(i, true)) << "batch " << b << ", sample " << i;
        EXPECT_EQ(sample_of(g, "g_group", k), group_member(i, true)) << "batch " << b << ", sample " << i;
      }
    }
    runs[workers] = got;
  }
  EXPECT_TRUE(runs[0].batches == runs[2].batches) << "0 and 2 workers deliver different batches";
  EXPECT_EQ(runs[0].overflow_batches, runs[2].overflow_batches);
}

TEST(OverflowBatches, EveryFieldKindMixedArrivesExactlyAsWhenNothingOverflowsHdf5) {
  TempDir tmp;
  expect_overflow_changes_nothing(write_hdf5(tmp, true), write_hdf5(tmp, false));
}

TEST(OverflowBatches, EveryFieldKindMixedArrivesExactlyAsWhenNothingOverflowsLmdb) {
  TempDir tmp;
  expect_overflow_changes_nothing(write_lmdb(tmp, true), write_lmdb(tmp, false));
}

// A tiny file whose samples claim far more than it holds (sample-group members HDF5 was never
// given data for, which read as zeros): the batch that holds them is refused, before the training
// process takes memory for it, naming the batch, its largest sample and the bound; the batches
// before it arrive, and the loader goes on past it.
TEST(OverflowBatches, ABatchClaimingMoreThanTheFileHoldsIsRefusedAndTheLoaderGoesOn) {
  TempDir tmp;
  const std::string p = tmp.path("hollow.h5");
  const std::uint64_t n = 31;  // slots sized from samples 0, 2, ... 30; 5 and 7 claim 3 MiB each
  std::vector<std::int64_t> labels(n);
  {
    test::H5Builder f(p);
    f.group("blob");
    for (std::uint64_t i = 0; i < n; ++i) {
      labels[i] = static_cast<std::int64_t>(i);
      if (i == 5 || i == 7) {
        f.unwritten("blob/" + std::to_string(i), (3u << 20) + i);
      } else {
        const Bytes b(100 + i, std::byte{1});
        f.array("blob/" + std::to_string(i), H5T_NATIVE_UINT8, {b.size()}, b.data());
      }
    }
    f.array("label", H5T_NATIVE_INT64, {n}, labels.data());
  }
  const std::uint64_t file_bytes = std::filesystem::file_size(p);
  ASSERT_LT(file_bytes, 1u << 20);
  for (std::size_t workers : {0u, 2u}) {
    SCOPED_TRACE(fmt::format("{} workers", workers));
    Options o;
    o.source = p;
    o.batch_size = 4;
    o.num_workers = workers;
    o.on_warning = [](std::string_view) {};
    Loader loader(o);
    Epoch epoch = loader.epoch(0);
    const std::optional<Batch> first = epoch.next();
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->field("label").as<std::int64_t>()[3], 3);
    test::expect_error(
        ErrorCode::dataset, [&] { epoch.next(); },
        {fmt::format("hollow.h5: batch 1 of epoch 0, too large for its slot and read again: its bytes fields hold 6.0 "
                     "MiB ('blob' 6.0 MiB, its largest sample 7 of 3.0 MiB), more than a batch read again may take: "
                     "the dataset's size on disk, {}: no batch of distinct samples",
                     detail::format_bytes(file_bytes)),
         "it is damaged or crafted", "or use a smaller Options::batch_size"});
    std::uint64_t after = 0;
    for (Batch& b : loader.epoch(0, 2)) after += b.size();
    EXPECT_EQ(after, n - 8);
  }
}

}  // namespace
}  // namespace stoker
