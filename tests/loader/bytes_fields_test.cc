// Variable-length (bytes) fields from every layout that holds them, and the worker pipelines that
// decode and augment them.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <lmdb.h>
#include <spng.h>
#include <turbojpeg.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "formats/core/reader.h"
#include "formats/core/schema_json.h"
#include "formats/hdf5/hdf5_schema.h"
#include "formats/lmdb/lmdb_env.h"
#include "formats/lmdb/lmdb_reader.h"
#include "formats/lmdb/lmdb_writer.h"
#include "stoker/digest.h"
#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/pipeline.h"
#include "tests/support/test_data.h"
#include "tests/support/test_images.h"

namespace stoker {
namespace {

using test::expect_error;
using test::TempDir;
using test::write_plain_lmdb;
using ::testing::HasSubstr;

using Bytes = std::vector<std::byte>;

// Sample i of a bytes field: a length and content that are functions of i (some empty).
Bytes var_sample(std::uint64_t i) {
  Bytes b((i * 37) % 300);
  for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((i * 7 + k * 13) & 0xff);
  return b;
}

// An RGB image whose pixels are a function of (x, y, c, seed).
std::vector<std::uint8_t> pixels(int h, int w, int seed) {
  std::vector<std::uint8_t> p(static_cast<std::size_t>(h) * w * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        p[(static_cast<std::size_t>(y) * w + x) * 3 + c] =
            static_cast<std::uint8_t>((x * 5 + y * 3 + c * 80 + seed * 11) & 0xff);
      }
    }
  }
  return p;
}

Bytes jpeg(const std::vector<std::uint8_t>& rgb, int h, int w, int quality = 90) {
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(0, tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &out, &size, TJSAMP_420, quality, 0));
  Bytes b(reinterpret_cast<std::byte*>(out), reinterpret_cast<std::byte*>(out) + size);
  tjFree(out);
  tjDestroy(tj);
  return b;
}

Bytes png(const std::vector<std::uint8_t>& rgb, int h, int w) { return test::encode_png(rgb, h, w); }

Bytes text(std::string_view s) {
  return Bytes(reinterpret_cast<const std::byte*>(s.data()), reinterpret_cast<const std::byte*>(s.data()) + s.size());
}

// Every sample of every epoch-0 batch of field `name`, by dataset index, checking that each index
// comes exactly once.
std::map<std::uint64_t, Bytes> load_all(Options o, const std::string& name) {
  Loader loader(o);
  std::map<std::uint64_t, Bytes> out;
  for (Batch& b : loader.epoch(0)) {
    const FieldView& f = b.field(name);
    EXPECT_EQ(f.kind, FieldKind::bytes);
    EXPECT_EQ(f.offsets.size(), b.size() + 1);
    EXPECT_EQ(f.offsets.front(), 0u);
    EXPECT_EQ(f.offsets.back(), f.bytes);
    for (std::size_t k = 0; k < b.size(); ++k) {
      const auto s = f.sample(k);
      EXPECT_TRUE(out.emplace(b.indices()[k], Bytes(s.begin(), s.end())).second) << "sample twice: " << b.indices()[k];
    }
  }
  return out;
}

std::vector<Bytes> var_samples(std::uint64_t n) {
  std::vector<Bytes> v;
  for (std::uint64_t i = 0; i < n; ++i) v.push_back(var_sample(i));
  return v;
}

TEST(BytesFields, VariableLengthHdf5DatasetDeliversEverySampleExactlyWithAnyWorkers) {
  TempDir tmp;
  const std::string p = tmp.path("v.h5");
  const std::uint64_t n = 203;
  {
    test::H5Builder f(p);
    f.vlen("blob", var_samples(n));
    std::vector<std::int64_t> labels(n);
    std::iota(labels.begin(), labels.end(), 0);
    f.array("label", H5T_NATIVE_INT64, {n}, labels.data());
  }
  for (std::size_t workers : {0u, 2u}) {
    Options o;
    o.source = p;
    o.batch_size = 16;
    o.num_workers = workers;
    o.shuffle = true;
    Loader probe(o);
    EXPECT_EQ(probe.schema().describe_fields(), "blob: bytes, label: i64[]");
    EXPECT_THAT(probe.describe_source(), HasSubstr("'blob': variable-length u8 dataset 'blob'"));
    const auto got = load_all(o, "blob");
    ASSERT_EQ(got.size(), n);
    for (const auto& [i, b] : got) EXPECT_EQ(b, var_sample(i)) << "sample " << i << ", workers " << workers;
  }
}

TEST(BytesFields, SampleGroupIsOneFieldAndGroupsNameFieldsRelatively) {
  TempDir tmp;
  const std::string p = tmp.path("g.h5");
  const std::uint64_t n = 57;
  {
    test::H5Builder f(p);
    f.group("train");
    std::vector<Bytes> samples = var_samples(n);
    for (auto& s : samples) {
      if (s.empty()) s.push_back(std::byte{42});
    }
    f.members("train/data", samples);
    std::vector<std::int64_t> labels(n, 3);
    f.array("train/label", H5T_NATIVE_INT64, {n}, labels.data());
  }
  Options o;
  o.source = p;
  o.group = "train";
  o.batch_size = 10;
  o.num_workers = 2;
  const auto got = load_all(o, "data");
  ASSERT_EQ(got.size(), n);
  for (const auto& [i, b] : got) {
    Bytes want = var_sample(i);
    if (want.empty()) want.push_back(std::byte{42});
    EXPECT_EQ(b, want) << "sample " << i;
  }
  Loader loader(o);
  EXPECT_EQ(loader.schema().describe_fields(), "data: bytes, label: i64[]");
  EXPECT_THAT(loader.describe_source(), HasSubstr("group 'train/data' of 57 datasets '0' .. '56' (u8)"));

  // By path from the root, the same.
  Options by_path = o;
  by_path.group.clear();
  by_path.fields = {"train/data"};
  EXPECT_EQ(load_all(by_path, "train/data").size(), n);

  Options missing = o;
  missing.group = "test";
  expect_error(ErrorCode::invalid_option, [&] { Loader l(missing); },
               {"no group 'test' (datasets in the root group: none; groups: train)"});
  Options unknown = o;
  unknown.fields = {"images"};
  expect_error(ErrorCode::invalid_option, [&] { Loader l(unknown); },
               {"unknown field 'images' (datasets in group 'train': label; groups: data)"});
}

TEST(BytesFields, Hdf5BytesFieldsThatCannotBeDeliveredAreNamed) {
  TempDir tmp;
  const std::string p = tmp.path("bad.h5");
  {
    test::H5Builder f(p);
    std::vector<Bytes> opaque(4, Bytes(8));
    const hid_t four_bytes = H5Tcreate(H5T_OPAQUE, 4);
    f.vlen("vec", opaque, four_bytes);
    H5Tclose(four_bytes);
  }
  Options o;
  o.source = p;
  expect_error(ErrorCode::dataset, [&] { Loader l(o); },
               {"'vec' (variable-length data of 4-byte non-numeric elements; stoker reads variable-length numbers "
                "as a bytes field)"});
  {
    test::H5Builder f(p);
    f.group("data");
    const std::uint8_t a[2] = {1, 2};
    const std::int16_t b[2] = {1, 2};
    f.array("data/0", H5T_NATIVE_UINT8, {2}, a);
    f.array("data/1", H5T_NATIVE_INT16, {2}, b);
  }
  o.batch_size = 2;
  {
    Loader l(o);
    expect_error(ErrorCode::dataset,
                 [&] {
                   for (Batch& b : l.epoch(0)) (void)b;
                 },
                 {"group 'data': sample 1 (member '1') is i16, but the group's member '0' is u8"});
  }
  {
    test::H5Builder f(p);
    f.group("misc");
    const std::uint8_t a[2] = {1, 2};
    f.array("misc/first", H5T_NATIVE_UINT8, {2}, a);
  }
  o.fields = {"misc"};
  expect_error(ErrorCode::invalid_option, [&] { Loader bad(o); },
               {"field 'misc' is a group whose members are not named 0 .. N-1"});
}

// Token ids as h5py's vlen_dtype(np.int32) writes them: a bytes field of i32, through the loader
// (offsets in bytes, values exact), the schema's JSON (LMDB's schema record, the workers' setup), and
// refused where a pipeline wants encoded bytes.
TEST(BytesFields, VariableLengthNumbersAreABytesFieldOfTheirDtype) {
  TempDir tmp;
  const std::string p = tmp.path("tokens.h5");
  const std::uint64_t n = 11;
  std::vector<Bytes> tokens(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    for (std::uint64_t k = 0; k < i % 4; ++k) {
      const auto v = static_cast<std::int32_t>(i * 1000 - k * 7) - 5000;
      const auto* b = reinterpret_cast<const std::byte*>(&v);
      tokens[i].insert(tokens[i].end(), b, b + sizeof v);
    }
  }
  {
    test::H5Builder f(p);
    f.vlen("tokens", tokens, H5T_STD_I32LE);
  }
  for (const std::uint32_t workers : {0u, 2u}) {
    SCOPED_TRACE(workers);
    Options o;
    o.source = p;
    o.batch_size = 4;
    o.num_workers = workers;
    Loader l(o);
    EXPECT_EQ(l.schema().fields.at(0), Field::bytes_field("tokens", DType::i32));
    for (Batch& b : l.epoch(0)) {
      const FieldView& f = b.fields()[0];
      EXPECT_EQ(f.dtype, DType::i32);
      for (std::size_t k = 0; k < b.size(); ++k) {
        const std::span<const std::byte> got = f.sample(k);
        EXPECT_EQ(Bytes(got.begin(), got.end()), tokens[b.indices()[k]]) << "offsets count bytes";
      }
    }
    o.pipeline = "tokens=decode(8,8)";
    expect_error(ErrorCode::invalid_option, [&] { Loader bad(o); },
                 {"decodes encoded images (a bytes field), and its input is variable-length i32"});
  }
  formats::StoredSchema stored{formats::hdf5_schema(p), true, std::nullopt, {0}};
  EXPECT_EQ(formats::schema_from_json(formats::schema_to_json(stored), "ctx").schema, stored.schema);
  Schema shaped = stored.schema;
  shaped.fields[0].shape = {4};
  expect_error(ErrorCode::dataset, [&] { shaped.validate("ctx"); },
               {"ctx: field 'tokens' is of kind bytes and must have shape [] (it has [4])"});
  // A database whose schema says i32 and whose sample 5 is not a whole number of them: named.
  const std::string bad = tmp.path("bad.lmdb");
  {
    Schema one = stored.schema;
    formats::LmdbWriter w(bad, one, {});
    for (std::uint64_t i = 0; i < n; ++i) {
      Bytes b = tokens[i];
      if (i == 5) b.resize(3);
      const std::span<const std::byte> parts[1] = {b};
      w.append_sample(parts);
    }
    w.finish("0000000000000000");
  }
  for (const std::uint32_t workers : {0u, 1u}) {
    Options o;
    o.source = bad;
    o.batch_size = 4;
    o.num_workers = workers;
    Loader l(o);
    expect_error(ErrorCode::dataset,
                 [&] {
                   for (Batch& b : l.epoch(0)) (void)b;
                 },
                 {bad, "field 'tokens', sample 5: 3 bytes, not a whole number of its 4-byte i32 values"});
  }
}

// A batch too large for its slot is read again outside the ring, its bytes fields in memory of
// their own: a field of i32 values after one of odd lengths still starts where an i32 may.
TEST(BytesFields, ValuesOfABatchReadOutsideTheRingAreAligned) {
  TempDir tmp;
  const std::string p = tmp.path("typed.h5");
  const std::uint64_t n = 91;  // slots sized from samples 0, 6, 12, ...: sample 7 is not looked at
  std::vector<Bytes> odd(n), tokens(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    odd[i] = Bytes(i == 7 ? 300001 : (i * 7) % 13 + 1, static_cast<std::byte>(i));
    for (std::uint64_t k = 0; k < i % 5; ++k) {
      const auto v = static_cast<std::int32_t>(i * 100 + k);
      const auto* b = reinterpret_cast<const std::byte*>(&v);
      tokens[i].insert(tokens[i].end(), b, b + sizeof v);
    }
  }
  {
    test::H5Builder f(p);
    f.vlen("a", odd);
    f.vlen("b", tokens, H5T_STD_I32LE);
  }
  Options o;
  o.source = p;
  o.batch_size = 10;
  o.num_workers = 1;
  o.on_warning = [](std::string_view) {};
  Loader l(o);
  for (Batch& b : l.epoch(0)) {
    const FieldView& t = b.fields()[1];
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data) % alignof(std::int32_t), 0u) << "batch " << b.index();
    for (std::size_t k = 0; k < b.size(); ++k) {
      const std::span<const std::byte> got = t.sample(k);
      EXPECT_EQ(Bytes(got.begin(), got.end()), tokens[b.indices()[k]]);
    }
  }
  EXPECT_EQ(l.stats().overflow_batches, 1u);
}

TEST(BytesFields, LmdbLayout2RoundTripsAndRecordsTheLargestSample) {
  TempDir tmp;
  const std::string p = tmp.path("v2.lmdb");
  const std::uint64_t n = 90;
  Schema schema;
  schema.num_samples = n;
  schema.fields = {Field::bytes_field("blob"), Field{"label", FieldKind::fixed, DType::i64, {}}};
  std::uint64_t largest = 0;
  auto append = [&](formats::LmdbWriter& w, std::uint64_t i) {
    const Bytes b = var_sample(i);
    const std::int64_t label = static_cast<std::int64_t>(i) * 3;
    const std::span<const std::byte> parts[2] = {b, std::as_bytes(std::span(&label, 1))};
    w.append_sample(parts);
    largest = std::max<std::uint64_t>(largest, b.size());
  };
  {
    // Written in two runs, as a resumed conversion is: the largest sample may be in the first.
    {
      formats::LmdbWriter w(p, schema, {});
      for (std::uint64_t i = 0; i < 85; ++i) append(w, i);  // the largest is sample 81
      w.commit();
    }
    formats::LmdbWriter w(p, schema, {});
    ASSERT_EQ(w.next_index(), 85u);
    const std::uint64_t largest_first = largest;
    largest = 0;
    for (std::uint64_t i = 85; i < n; ++i) append(w, i);
    ASSERT_LT(largest, largest_first);
    largest = largest_first;
    w.finish("0000000000000000");
  }
  const auto stored = formats::lmdb_stored_schema(p);
  EXPECT_EQ(stored.schema, schema);
  EXPECT_EQ(stored.max_bytes, (std::vector<std::uint64_t>{largest, 0}));
  formats::LmdbReader r(p, {"label", "blob"});
  EXPECT_EQ(r.sample_bound(1).bytes, largest);
  EXPECT_TRUE(r.sample_bound(1).exact);

  Options o;
  o.source = p;
  o.batch_size = 8;
  o.num_workers = 2;
  o.shuffle = true;
  const auto got = load_all(o, "blob");
  ASSERT_EQ(got.size(), n);
  for (const auto& [i, b] : got) EXPECT_EQ(b, var_sample(i));

  // A record whose lengths do not add up is named.
  test::overwrite_lmdb_record(p, 5, "short");
  o.shuffle = false;
  o.num_workers = 0;
  Loader l(o);
  expect_error(ErrorCode::dataset,
               [&] {
                 for (Batch& b : l.epoch(0)) (void)b;
               },
               {"sample 5 (key 0000000000000005) has 5 bytes, less than the 16 of its fixed fields and 1 length(s)"});
}

TEST(BytesFields, DatabasesWithoutASchemaAreReadByTheirKeys) {
  TempDir tmp;
  const std::uint64_t n = 123;
  struct Style {
    const char* name;
    std::function<Bytes(std::uint64_t)> key;
    const char* described;
  };
  const Style styles[] = {
      {"decimal", [](std::uint64_t i) { return text(std::to_string(i)); }, "keys decimal (b'0', b'1', ...)"},
      {"padded", [](std::uint64_t i) { return text(fmt::format("{:08}", i)); }, "zero-padded decimal of 8 digits"},
      {"big-endian",
       [](std::uint64_t i) {
         Bytes k(8);
         for (int b = 0; b < 8; ++b) k[7 - b] = static_cast<std::byte>((i >> (8 * b)) & 0xff);
         return k;
       },
       "8-byte big-endian integers"},
  };
  for (const Style& s : styles) {
    const std::string p = tmp.path(std::string(s.name) + ".lmdb");
    std::vector<std::pair<Bytes, Bytes>> records;
    for (std::uint64_t i = 0; i < n; ++i) records.emplace_back(s.key(i), var_sample(i));
    write_plain_lmdb(p, records);
    Options o;
    o.source = p;
    o.batch_size = 10;
    o.num_workers = 2;
    o.shuffle = true;
    Loader probe(o);
    EXPECT_EQ(probe.schema().describe_fields(), "data: bytes") << s.name;
    EXPECT_THAT(probe.describe_source(), HasSubstr(s.described));
    const auto got = load_all(o, "data");
    ASSERT_EQ(got.size(), n) << s.name;
    for (const auto& [i, b] : got) EXPECT_EQ(b, var_sample(i)) << s.name << " sample " << i;
  }
  // A missing index is named, with its key.
  const std::string gap = tmp.path("gap.lmdb");
  write_plain_lmdb(gap, {{text("0"), text("a")}, {text("1"), text("b")}, {text("3"), text("d")}});
  Options o;
  o.source = gap;
  expect_error(ErrorCode::dataset, [&] { Loader l(o); }, {"sample 2 (key b'2') is missing: the database holds 3 keys"});
  const std::string words = tmp.path("words.lmdb");
  write_plain_lmdb(words, {{text("0"), text("a")}, {text("cat"), text("b")}});
  o.source = words;
  expect_error(ErrorCode::dataset, [&] { Loader l(o); }, {"key b'cat' is not a sample index like the first key"});
}

Bytes npy(const std::string& descr, const std::string& shape, const Bytes& data) {
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  Bytes out = text(std::string("\x93NUMPY\x01\x00", 8));
  out.push_back(static_cast<std::byte>(header.size() & 0xff));
  out.push_back(static_cast<std::byte>(header.size() >> 8));
  const Bytes h = text(header);
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

TEST(BytesFields, NpyValuesOfOneHeaderBecomeAFixedField) {
  TempDir tmp;
  const std::string p = tmp.path("npy.lmdb");
  const std::uint64_t n = 40;
  std::vector<std::pair<Bytes, Bytes>> records;
  for (std::uint64_t i = 0; i < n; ++i) {
    std::vector<float> v(6, static_cast<float>(i));
    records.emplace_back(text(std::to_string(i)), npy("<f4", "(2, 3)",
                                                      Bytes(reinterpret_cast<std::byte*>(v.data()),
                                                            reinterpret_cast<std::byte*>(v.data()) + 24)));
  }
  write_plain_lmdb(p, records);
  Options o;
  o.source = p;
  o.batch_size = 7;
  o.num_workers = 2;
  Loader loader(o);
  EXPECT_EQ(loader.schema().describe_fields(), "data: f32[2,3]");
  std::uint64_t seen = 0;
  for (Batch& b : loader.epoch(0)) {
    const auto v = b["data"].as<float>();
    for (std::size_t k = 0; k < b.size(); ++k) {
      for (int e = 0; e < 6; ++e) EXPECT_EQ(v[k * 6 + e], static_cast<float>(b.indices()[k]));
    }
    seen += b.size();
  }
  EXPECT_EQ(seen, n);

  // A header that lies about its size, and one that differs from sample 0's.
  records[17].second = npy("<f4", "(2, 3)", Bytes(20));
  records[23].second = npy("<i8", "(3,)", Bytes(24));
  write_plain_lmdb(p, records);
  for (std::uint64_t bad : {17u, 23u}) {
    Options one = o;
    one.num_workers = 0;
    one.batch_size = 1;
    Loader l(one);
    const test::Caught e = test::caught([&] { l.epoch(0, bad).next(); });
    EXPECT_EQ(e.code, ErrorCode::dataset) << e.message;
    EXPECT_THAT(e.message, HasSubstr(fmt::format("sample {} (key b'{}')", bad, bad)));
    EXPECT_THAT(
        e.message,
        HasSubstr(bad == 17 ? "its .npy header says 24 bytes of data, the value holds 20"
                            : "its .npy header (i64[3]) differs from sample 0's, which made the field data: f32[2,3]"));
  }
}

// With workers the batch is read again in a child process, never in this one: the file is never
// opened here.
bool opened_here(const std::string& path) {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec) == std::filesystem::path(path)) return true;
  }
  return false;
}

TEST(BytesFields, ABatchLargerThanItsSlotIsReadAgainOutsideTheRingAndSaysSo) {
  TempDir tmp;
  const std::string p = tmp.path("big.h5");
  // The slot is sized from 16 samples spread over the dataset (0, 13, 26, ...), all small here;
  // the others are 40x larger.
  const std::uint64_t n = 196;
  std::vector<Bytes> samples;
  for (std::uint64_t i = 0; i < n; ++i) {
    Bytes b(i % 13 == 0 ? 100 : 20000 + i);
    for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((i + k) & 0xff);
    samples.push_back(std::move(b));
  }
  {
    test::H5Builder f(p);
    f.vlen("blob", samples);
  }
  for (std::size_t workers : {0u, 2u}) {
    Options o;
    o.source = p;
    o.batch_size = 32;
    o.num_workers = workers;
    std::vector<std::string> warnings;
    o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
    Loader loader(o);
    std::uint64_t seen = 0;
    for (Batch& b : loader.epoch(0)) {
      for (std::size_t k = 0; k < b.size(); ++k) {
        const auto s = b["blob"].sample(k);
        EXPECT_EQ(Bytes(s.begin(), s.end()), samples[b.indices()[k]]);
        ++seen;
      }
    }
    EXPECT_EQ(seen, n);
    EXPECT_GT(loader.stats().overflow_batches, 0u);
    ASSERT_EQ(warnings.size(), 1u) << "one warning, however many batches";
    EXPECT_THAT(warnings[0], HasSubstr("more than its region in shared memory holds ('blob' "));
    if (workers > 0) {
      EXPECT_FALSE(opened_here(p)) << "the training process opened the dataset";
    }
  }
}

TEST(BytesFields, BytesFieldsStayOnTheCpu) {
  TempDir tmp;
  const std::string p = tmp.path("v.h5");
  {
    test::H5Builder f(p);
    f.vlen("blob", var_samples(10));
  }
  Options o;
  o.source = p;
  o.device = Device::emulated();
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); },
               {"field(s) blob are variable-length bytes, which stoker delivers "
                "on the CPU only: decode them in the workers with a pipeline"});
}

// ---- pipelines ----

// The message of the error that refuses a loader of pipeline `text`, which must be an invalid_option.
std::string pipeline_error(const std::string& text, const Options& base) {
  Options o = base;
  o.pipeline = text;
  const test::Caught e = test::caught([&] { Loader l(o); });
  EXPECT_EQ(e.code, ErrorCode::invalid_option) << text << ": " << e.message;
  return e.message;
}

// n JPEG images of assorted sizes in a vlen dataset "jpeg", and their labels.
std::string jpeg_dataset(const TempDir& tmp, std::uint64_t n, int base = 40) {
  const std::string p = tmp.path("jpeg.h5");
  std::vector<Bytes> images;
  for (std::uint64_t i = 0; i < n; ++i) {
    const int h = base + static_cast<int>(i % 7) * 9, w = base + static_cast<int>(i % 5) * 13;
    images.push_back(jpeg(pixels(h, w, static_cast<int>(i)), h, w, 60 + static_cast<int>(i % 4) * 10));
  }
  test::H5Builder f(p);
  f.vlen("jpeg", images);
  std::vector<std::int64_t> labels(n);
  std::iota(labels.begin(), labels.end(), 0);
  f.array("label", H5T_NATIVE_INT64, {n}, labels.data());
  return p;
}

TEST(Pipelines, BadPipelinesAreRefusedNamingWhatIsWrong) {
  TempDir tmp;
  Options o;
  o.source = jpeg_dataset(tmp, 5);
  EXPECT_THAT(pipeline_error("jpeg=decode,blur(3)", o),
              HasSubstr("field 'jpeg', operation 2: unknown operation 'blur' (operations: decode, "));
  EXPECT_THAT(pipeline_error("jpeg=decode,random_resized_crop(0)", o),
              HasSubstr("'random_resized_crop(0)': the height must be a whole number from 1 to 65536, not 0"));
  EXPECT_THAT(pipeline_error("jpeg=decode,resize(32,32,3)", o),
              HasSubstr("'resize(32,32,3)': takes (size) for the shorter side, or (height, width) (got 3 arguments)"));
  EXPECT_THAT(pipeline_error("jpeg=decode,center_crop(a)", o),
              HasSubstr("'center_crop(a)': argument 1 ('a') is not a number"));
  EXPECT_THAT(pipeline_error("jpeg=decode,center_crop(8", o), HasSubstr("unbalanced '('"));
  EXPECT_THAT(pipeline_error("image=decode,resize(8,8)", o),
              HasSubstr("pipeline: no field 'image' to run it on (fields: jpeg: bytes, label: i64[])"));
  EXPECT_THAT(pipeline_error("jpeg=decode", o),
              HasSubstr("field 'jpeg' ends in u8[?,?,3], whose size differs per sample"));
  EXPECT_THAT(pipeline_error("jpeg=resize(8,8)", o),
              HasSubstr("'resize(8,8)' needs an image, and its input is encoded bytes: decode first"));
  EXPECT_THAT(pipeline_error("jpeg=decode,to_chw,resize(8,8)", o),
              HasSubstr("'resize(8,8)' works on HWC images: put it before to_chw"));
  EXPECT_THAT(pipeline_error("jpeg=decode,resize(8,8),normalize(1,2)", o),
              HasSubstr("1 means and stds for an image of 3 channels"));
  EXPECT_THAT(pipeline_error("label=decode,resize(8,8)", o),
              HasSubstr("decodes encoded images (a bytes field), and its input is i64[]"));
  expect_error(ErrorCode::invalid_option, [] { check_pipeline("jpeg=decode,flip(2)"); },
               {"'flip(2)': the probability must be within [0, 1]"});
  expect_error(ErrorCode::invalid_option, [] { check_pipeline("jpeg decode"); }, {"is not FIELD=operations"});
}

TEST(Pipelines, RandomAugmentationGivesTheSameBatchesForAnyNumberOfWorkers) {
  TempDir tmp;
  Options o;
  o.source = jpeg_dataset(tmp, 61);
  o.batch_size = 8;
  o.shuffle = true;
  o.seed = 5;
  o.pipeline = "jpeg=decode,random_resized_crop(24,32),flip,to_chw,normalize(0.5,0.5,0.5,0.25,0.25,0.25)";
  std::vector<std::string> digests;
  for (std::size_t workers : {0u, 1u, 2u}) {
    o.num_workers = workers;
    Loader loader(o);
    EXPECT_EQ(loader.schema().describe_fields(), "jpeg: f32[3,24,32], label: i64[]");
    std::string d;
    for (std::uint64_t e : {0u, 1u}) {
      ContentDigest c;
      for (Batch& b : loader.epoch(e)) c.add(b);
      d += c.hex();
    }
    digests.push_back(d);
  }
  EXPECT_EQ(digests[0], digests[1]);
  EXPECT_EQ(digests[0], digests[2]);
  EXPECT_NE(digests[0].substr(0, 16), digests[0].substr(16)) << "each epoch draws anew";
  o.seed = 6;
  Loader other(o);
  ContentDigest c;
  for (Batch& b : other.epoch(0)) c.add(b);
  EXPECT_NE(c.hex(), digests[0].substr(0, 16)) << "another seed, other crops";
}

TEST(Pipelines, LosslessImagesComeThroughExactly) {
  TempDir tmp;
  const std::string p = tmp.path("png.h5");
  const int h = 30, w = 20;
  std::vector<std::vector<std::uint8_t>> rgb;
  {
    std::vector<Bytes> images;
    for (int i = 0; i < 6; ++i) {
      rgb.push_back(pixels(h, w, i));
      images.push_back(png(rgb.back(), h, w));
    }
    test::H5Builder f(p);
    f.vlen("img", images);
  }
  Options o;
  o.source = p;
  o.batch_size = 6;
  auto first_batch = [&](const std::string& pipeline) {
    o.pipeline = pipeline;
    Loader l(o);
    Batch b = *l.epoch(0).next();
    const auto s = b["img"];
    return std::vector<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(s.data),
                                     reinterpret_cast<const std::uint8_t*>(s.data) + s.bytes);
  };
  const std::size_t per = static_cast<std::size_t>(h) * w * 3;
  // decode: the pixels.
  auto decoded = first_batch("img=decode(30,20)");
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::equal(rgb[i].begin(), rgb[i].end(), decoded.begin() + i * per)) << i;
  // flip(1) always flips; to_chw transposes; center_crop takes the middle; resize to the same size is the identity.
  auto flipped = first_batch("img=decode(30,20),flip(1),to_chw");
  auto cropped = first_batch("img=decode,center_crop(10,6)");
  auto same = first_batch("img=decode,resize(30,20)");
  EXPECT_EQ(same, decoded);
  for (int i = 0; i < 6; ++i) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        for (int c = 0; c < 3; ++c) {
          const std::uint8_t v = rgb[i][(y * w + x) * 3 + c];
          ASSERT_EQ(flipped[i * per + (c * h + y) * w + (w - 1 - x)], v);
          if (y >= 10 && y < 20 && x >= 7 && x < 13) {
            ASSERT_EQ(cropped[i * 180 + ((y - 10) * 6 + (x - 7)) * 3 + c], v);
          }
        }
      }
    }
  }
  // A crop larger than the image is padded with zeros around it, as torchvision pads.
  auto padded = first_batch("img=decode,center_crop(32,24)");
  EXPECT_EQ(padded[0], 0);
  EXPECT_EQ(padded[((1 * 24) + 2) * 3], rgb[0][0]);
}

TEST(Pipelines, CorruptImagesAreErrorsAtTheirBatchNamingSampleAndField) {
  TempDir tmp;
  const std::string p = tmp.path("bad.h5");
  std::vector<Bytes> images;
  for (int i = 0; i < 12; ++i) images.push_back(jpeg(pixels(32, 32, i), 32, 32));
  images[9].resize(images[9].size() / 2);           // truncated
  images[10] = text("GIF89a not an image at all");  // neither JPEG nor PNG
  {
    test::H5Builder f(p);
    f.vlen("jpeg", images);
  }
  for (std::size_t workers : {0u, 2u}) {
    Options o;
    o.source = p;
    o.batch_size = 3;
    o.num_workers = workers;
    o.pipeline = "jpeg=decode,center_crop(16)";
    Loader l(o);
    Epoch e = l.epoch(0);
    for (int b = 0; b < 3; ++b) EXPECT_TRUE(e.next().has_value()) << "the batches before are delivered";
    const test::Caught err = test::caught([&] { e.next(); });
    EXPECT_EQ(err.code, ErrorCode::dataset) << err.message;
    EXPECT_THAT(err.message, HasSubstr("batch 3 of epoch 0"));
    EXPECT_THAT(err.message, HasSubstr("field 'jpeg', sample 9: corrupt JPEG"));
    Options one = o;
    one.batch_size = 1;
    Loader l2(one);
    expect_error(ErrorCode::dataset, [&] { l2.epoch(0, 10).next(); },
                 {"field 'jpeg', sample 10: not a JPEG or PNG image (26 bytes, starting 474946383961206e)"});
    one.pipeline = "jpeg=decode_png,center_crop(8)";
    Loader png_only(one);
    expect_error(ErrorCode::dataset, [&] { png_only.epoch(0).next(); },
                 {"sample 0: the image is a JPEG; 'decode_png' decodes PNG only (decode takes either)"});
    one.pipeline = "jpeg=decode(32,30)";
    Loader l3(one);
    expect_error(ErrorCode::dataset, [&] { l3.epoch(0).next(); },
                 {"sample 0: the image is 32x32 (height x width); 'decode(32,30)' declares 32x30"});
  }
}

// A PNG cut short is an error when its missing rows are needed, decoded whole or cropped (a crop
// stops decoding at its last row, as for a JPEG, so the cut must not pass unnoticed above it).
TEST(Pipelines, ATruncatedPngIsAnErrorWhereItsMissingRowsAreNeeded) {
  TempDir tmp;
  const std::string p = tmp.path("cut.h5");
  const int h = 64, w = 64;
  // Rows of noise compress poorly, so that half the file is about half the rows.
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  std::uint32_t x = 12345;
  for (auto& v : rgb) v = static_cast<std::uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  Bytes cut = png(rgb, h, w);
  cut.resize(cut.size() / 2);
  {
    test::H5Builder f(p);
    f.vlen("img", {cut});
  }
  Options o;
  o.source = p;
  o.batch_size = 1;
  o.pipeline = "img=decode(64,64)";
  expect_error(ErrorCode::dataset, [&] { Loader(o).epoch(0).next(); }, {"field 'img', sample 0: corrupt PNG"});
  o.pipeline = "img=decode,center_crop(4,64)";  // rows 30..33: past the cut
  expect_error(ErrorCode::dataset, [&] { Loader(o).epoch(0).next(); }, {"corrupt PNG"});
}

// A user operation: inverts every byte (u8 images only).
OpSpec invert_spec(const OpSpec& in, std::span<const double> args) {
  if (in.bytes || in.dtype != DType::u8) throw Error("invert takes u8 arrays");
  if (!args.empty()) throw Error("invert takes no arguments");
  return in;
}
void invert(const SampleIn& in, SampleOut& out, std::span<const double>, SampleRandom&) {
  std::byte* o = out.resize(in.dtype, in.shape);
  for (std::size_t i = 0; i < in.data.size(); ++i) o[i] = ~in.data[i];
}
STOKER_REGISTER_OP(invert, invert_spec, invert);

// A user operation that throws what is not a std::exception (an int, here).
void throws_int(const SampleIn&, SampleOut&, std::span<const double>, SampleRandom&) { throw 42; }
STOKER_REGISTER_OP(throws_int, invert_spec, throws_int);

TEST(Pipelines, WhatAUserOperationThrowsIsNamedWithItsFieldSampleAndOperation) {
  TempDir tmp;
  const std::string p = tmp.path("png.h5");
  {
    test::H5Builder f(p);
    f.vlen("img", std::vector<Bytes>(4, png(pixels(8, 8, 3), 8, 8)));
  }
  for (std::size_t workers : {0u, 2u}) {
    Options o;
    o.source = p;
    o.batch_size = 4;
    o.num_workers = workers;
    o.pipeline = "img=decode(8,8),throws_int";
    expect_error(
        ErrorCode::dataset, [&] { Loader(o).epoch(0).next(); },
        {p + ": field 'img', sample 0: operation 'throws_int' threw an exception that is not a std::exception"});
  }
}

TEST(Pipelines, UserOperationsRunInTheWorkersByName) {
  TempDir tmp;
  const std::string p = tmp.path("png.h5");
  const auto rgb = pixels(8, 8, 3);
  {
    test::H5Builder f(p);
    f.vlen("img", std::vector<Bytes>(4, png(rgb, 8, 8)));
  }
  Options o;
  o.source = p;
  o.batch_size = 4;
  o.num_workers = 2;
  o.pipeline = "img=decode(8,8),invert";
  Loader l(o);
  Batch b = *l.epoch(0).next();
  const auto v = b["img"].as<std::uint8_t>();
  for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<std::uint8_t>(~rgb[i % rgb.size()]));
  EXPECT_THAT(pipeline_error("img=invert", o), HasSubstr("operation 1: invert takes u8 arrays"));
  expect_error(ErrorCode::invalid_option,
               [] {
                 register_op("invert", UserOp{invert_spec, invert});
               },
               {"an operation named 'invert' is already registered"});
  expect_error(ErrorCode::invalid_option,
               [] {
                 register_op("decode", UserOp{invert_spec, invert});
               },
               {"already registered"});
}

}  // namespace
}  // namespace stoker
