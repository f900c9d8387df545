// Samples a pipeline cannot decode (Options::on_decode_error): by default the batch fails naming
// the file, field and sample; with skip the sample is delivered with zeros in that field, its
// position listed in the batch, counted in Stats and told in one warning, and every epoch keeps
// its batches and indices. Without workers, with workers and on a staged (emulated) device alike.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoker/error.h"
#include "stoker/loader.h"
#include "stoker/pipeline.h"
#include "tests/support/test_data.h"

namespace stoker {
namespace {

using test::expect_error;
using test::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Bytes = std::vector<std::byte>;

Bytes jpeg_of(int seed) {
  const int h = 24, w = 32;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(h) * w * 3);
  for (std::size_t k = 0; k < rgb.size(); ++k) rgb[k] = static_cast<std::uint8_t>((k * 7 + seed * 29) & 0xff);
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(0, tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &out, &size, TJSAMP_420, 90, 0));
  Bytes b(reinterpret_cast<std::byte*>(out), reinterpret_cast<std::byte*>(out) + size);
  tjFree(out);
  tjDestroy(tj);
  return b;
}

// `n` JPEGs in field `jpeg` and their labels 0 .. n-1 in field `label`; `bad` images truncated to
// half their bytes.
void write_images(const std::string& path, std::uint64_t n, const std::vector<std::uint64_t>& bad) {
  std::vector<Bytes> images;
  for (std::uint64_t i = 0; i < n; ++i) images.push_back(jpeg_of(static_cast<int>(i)));
  for (const std::uint64_t i : bad) images[i].resize(images[i].size() / 2);
  std::vector<std::int64_t> labels(n);
  std::iota(labels.begin(), labels.end(), 0);
  test::H5Builder f(path);
  f.vlen("jpeg", images);
  f.array("label", H5T_NATIVE_INT64, {n}, labels.data());
}

struct LoaderRun {
  std::size_t workers;
  Device device;
};
const LoaderRun kRuns[] = {{0, Device::cpu()}, {2, Device::cpu()}, {2, Device::emulated()}};

Options options_for(const std::string& path, const LoaderRun& run) {
  Options o;
  o.source = path;
  o.batch_size = 4;
  o.num_workers = run.workers;
  o.device = run.device;
  o.shuffle = true;
  o.seed = 3;
  o.pipeline = "jpeg=decode,random_resized_crop(16),flip";
  return o;
}

// The good file's batches to compare with, on the CPU, and made before the Loader under test: a
// Loader of the emulated device runs a staging thread, and a Loader built while one runs forks its
// probe and fork server (on the fork-only path) from a process with a thread that may be inside
// the allocator at that instant, which under AddressSanitizer's allocator hangs the child.
Options reference_options(const std::string& good, const LoaderRun& run) {
  Options o = options_for(good, run);
  o.device = Device::cpu();
  return o;
}

Bytes host_copy(const Batch& b, std::size_t f) {
  Bytes out(b.fields()[f].bytes);
  b.copy_field_to_host(f, out.data());
  return out;
}

TEST(DecodeErrors, ASkippedSampleIsZerosListedCountedAndWarnedOfOnceAndEveryBatchIsDelivered) {
  TempDir tmp;
  const std::string good = tmp.path("good.h5"), bad = tmp.path("bad.h5");
  write_images(good, 10, {});
  write_images(bad, 10, {6});
  const std::size_t per = 16 * 16 * 3;
  for (const LoaderRun& run : kRuns) {
    SCOPED_TRACE(run.workers);
    SCOPED_TRACE(run.device.str());
    Options o = options_for(bad, run);
    o.on_decode_error = OnDecodeError::skip;
    std::vector<std::string> warnings;
    o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
    Loader reference(reference_options(good, run)), loader(o);
    for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
      Epoch ref = reference.epoch(epoch);
      std::uint64_t batches = 0, skipped_seen = 0;
      for (Batch& b : loader.epoch(epoch)) {
        std::optional<Batch> r = ref.next();
        ASSERT_TRUE(r.has_value());
        ++batches;
        ASSERT_EQ(std::vector<std::uint64_t>(b.indices().begin(), b.indices().end()),
                  std::vector<std::uint64_t>(r->indices().begin(), r->indices().end()));
        const auto six = std::find(b.indices().begin(), b.indices().end(), 6u);
        const Bytes images = host_copy(b, 0), expected_images = host_copy(*r, 0);
        EXPECT_EQ(host_copy(b, 1), host_copy(*r, 1)) << "the labels are delivered as stored";
        if (six == b.indices().end()) {
          EXPECT_TRUE(b.skipped().empty());
          EXPECT_EQ(images, expected_images);
          continue;
        }
        // The sample that does not decode is zeros, the others are what the good file gives.
        const auto at = static_cast<std::uint32_t>(six - b.indices().begin());
        EXPECT_THAT(std::vector<std::uint32_t>(b.skipped().begin(), b.skipped().end()), ElementsAre(at));
        ++skipped_seen;
        for (std::size_t k = 0; k < b.size(); ++k) {
          const Bytes got(images.begin() + k * per, images.begin() + (k + 1) * per);
          if (k == at) {
            EXPECT_EQ(got, Bytes(per, std::byte{0}));
          } else {
            EXPECT_EQ(got, Bytes(expected_images.begin() + k * per, expected_images.begin() + (k + 1) * per)) << k;
          }
        }
      }
      EXPECT_FALSE(ref.next().has_value());
      EXPECT_EQ(batches, 3u) << "every batch of the epoch";
      EXPECT_EQ(skipped_seen, 1u);
      const Stats s = loader.stats();
      EXPECT_EQ(s.samples, 10 * (epoch + 1));
      EXPECT_EQ(s.skipped_samples, epoch + 1) << "counted at each delivery";
      EXPECT_THAT(s.skipped_indices, ElementsAre(6u)) << "listed once";
    }
    ASSERT_EQ(warnings.size(), 1u) << "one warning for the sample, not one per epoch";
    EXPECT_THAT(warnings[0], HasSubstr(bad + ": field 'jpeg', sample 6: corrupt JPEG"));
    EXPECT_THAT(warnings[0], HasSubstr("; skipped (Options::on_decode_error = OnDecodeError::skip): the field holds "
                                       "zeros (batch "));
  }
}

// A batch too large for its slot (a bytes field beside the images outgrows its region) holding a
// sample that does not decode is read again outside the ring: it arrives exactly as a batch that
// fits would, the sample zeros, its position listed, counted and warned of once.
TEST(DecodeErrors, ABatchTooLargeForItsSlotWithASkippedSampleArrivesExactly) {
  TempDir tmp;
  const std::uint64_t n = 48;
  // The slots are sized from samples spread over the file (0, 3, 6, ...): sample 13's blob is far
  // larger than those, so batch 3 (samples 12 to 15) outgrows its slot; samples 14 and 30 do not
  // decode.
  const auto blob = [](std::uint64_t i) {
    Bytes b(i == 13 ? 60000 : 20 + i);
    for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::byte>((i * 17 + k) & 0xff);
    return b;
  };
  const auto write = [&](const std::string& path, const std::vector<std::uint64_t>& bad) {
    std::vector<Bytes> images, blobs;
    for (std::uint64_t i = 0; i < n; ++i) {
      images.push_back(jpeg_of(static_cast<int>(i)));
      blobs.push_back(blob(i));
    }
    for (const std::uint64_t i : bad) images[i].resize(images[i].size() / 2);
    test::H5Builder f(path);
    f.vlen("jpeg", images);
    f.vlen("blob", blobs);
  };
  const std::string good = tmp.path("good.h5"), bad = tmp.path("bad.h5");
  write(good, {});
  write(bad, {14, 30});
  for (const LoaderRun& run : kRuns) {
    if (run.device.staged()) continue;  // bytes fields are delivered on the CPU only
    SCOPED_TRACE(run.workers);
    SCOPED_TRACE(run.device.str());
    Options o = options_for(bad, run);
    o.shuffle = false;
    o.pipeline = "jpeg=decode,resize(8,8)";
    o.on_decode_error = OnDecodeError::skip;
    std::vector<std::string> warnings;
    o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
    Options r = o;
    r.source = good;
    r.on_decode_error = OnDecodeError::fail;
    Loader loader(o), reference(r);
    Epoch ref = reference.epoch(0);
    std::uint64_t batches = 0;
    for (Batch& b : loader.epoch(0)) {
      std::optional<Batch> want = ref.next();
      ASSERT_TRUE(want.has_value());
      SCOPED_TRACE(b.index());
      ++batches;
      const std::vector<std::uint32_t> skipped(b.skipped().begin(), b.skipped().end());
      if (b.index() == 3) {
        EXPECT_THAT(skipped, ElementsAre(2u));
      } else if (b.index() == 7) {
        EXPECT_THAT(skipped, ElementsAre(2u));
      } else {
        EXPECT_TRUE(skipped.empty());
      }
      const FieldView& blobs = b["blob"];
      for (std::size_t k = 0; k < b.size(); ++k) {
        const std::span<const std::byte> got = blobs.sample(k);
        EXPECT_EQ(Bytes(got.begin(), got.end()), blob(b.indices()[k])) << k;
      }
      const std::size_t jpeg = b["jpeg"].name.data() == b.fields()[0].name.data() ? 0 : 1;
      const Bytes images = host_copy(b, jpeg), expected = host_copy(*want, jpeg);
      const std::size_t per = 8 * 8 * 3;
      ASSERT_EQ(images.size(), b.size() * per);
      for (std::size_t k = 0; k < b.size(); ++k) {
        const Bytes got(images.begin() + k * per, images.begin() + (k + 1) * per);
        const bool zeros = std::find(skipped.begin(), skipped.end(), k) != skipped.end();
        EXPECT_EQ(
            got, zeros ? Bytes(per, std::byte{0}) : Bytes(expected.begin() + k * per, expected.begin() + (k + 1) * per))
            << k;
      }
    }
    EXPECT_EQ(batches, n / 4);
    const Stats s = loader.stats();
    EXPECT_EQ(s.overflow_batches, 1u);
    EXPECT_EQ(s.skipped_samples, 2u);
    EXPECT_THAT(s.skipped_indices, ElementsAre(14u, 30u));
    std::vector<std::string> skips;
    for (const std::string& w : warnings) {
      if (w.find("skipped (") != std::string::npos) skips.push_back(w);
    }
    ASSERT_EQ(skips.size(), 2u);
    EXPECT_THAT(skips[0], HasSubstr(bad + ": field 'jpeg', sample 14: corrupt JPEG"));
    EXPECT_THAT(skips[0], HasSubstr("(batch 3 of epoch 0, position 2)"));
    EXPECT_THAT(skips[1], HasSubstr(bad + ": field 'jpeg', sample 30: corrupt JPEG"));
  }
}

// An on_warning callback that throws, at the warning of a skipped sample, throws out of that call
// of next(); the batch is not lost: the next call delivers it, counted and warned of once.
TEST(DecodeErrors, AWarningCallbackThatThrowsLosesNoBatch) {
  TempDir tmp;
  const std::string good = tmp.path("good.h5"), bad = tmp.path("bad.h5");
  write_images(good, 10, {});
  write_images(bad, 10, {6});
  for (const LoaderRun& run : kRuns) {
    SCOPED_TRACE(run.workers);
    SCOPED_TRACE(run.device.str());
    Options o = options_for(bad, run);
    o.on_decode_error = OnDecodeError::skip;
    std::uint64_t thrown = 0;
    o.on_warning = [&](std::string_view w) {
      if (w.find("skipped (") == std::string_view::npos) return;
      ++thrown;
      throw std::runtime_error("warnings are errors here");
    };
    Loader reference(reference_options(good, run)), loader(o);
    for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
      Epoch e = loader.epoch(epoch), ref = reference.epoch(epoch);
      std::vector<std::vector<std::uint64_t>> got, want;
      for (Batch& b : ref) want.emplace_back(b.indices().begin(), b.indices().end());
      for (;;) {
        std::optional<Batch> b;
        try {
          b = e.next();
        } catch (const std::runtime_error& x) {
          EXPECT_STREQ(x.what(), "warnings are errors here");
          continue;
        }
        if (!b) break;
        got.emplace_back(b->indices().begin(), b->indices().end());
        const auto six = std::find(b->indices().begin(), b->indices().end(), 6u);
        if (six != b->indices().end()) {
          EXPECT_THAT(std::vector<std::uint32_t>(b->skipped().begin(), b->skipped().end()),
                      ElementsAre(static_cast<std::uint32_t>(six - b->indices().begin())));
        }
      }
      EXPECT_EQ(got, want) << "every batch, in order";
      const Stats s = loader.stats();
      EXPECT_EQ(s.batches, 3 * (epoch + 1));
      EXPECT_EQ(s.samples, 10 * (epoch + 1));
      EXPECT_EQ(s.skipped_samples, epoch + 1);
    }
    EXPECT_EQ(thrown, 1u) << "warned of once";
  }
}

TEST(DecodeErrors, WithoutSkipTheBatchFailsNamingFileFieldAndSample) {
  TempDir tmp;
  const std::string bad = tmp.path("bad.h5");
  write_images(bad, 10, {6});
  for (const LoaderRun& run : kRuns) {
    SCOPED_TRACE(run.workers);
    Options o = options_for(bad, run);
    o.shuffle = false;
    Loader loader(o);
    Epoch e = loader.epoch(0);
    EXPECT_TRUE(e.next().has_value()) << "the batch before is delivered";
    expect_error(ErrorCode::dataset, [&] { e.next(); },
                 {"batch 1 of epoch 0: " + bad + ": field 'jpeg', sample 6: corrupt JPEG"});
    EXPECT_EQ(loader.stats().skipped_samples, 0u);
  }
}

// In a shard set the sample is named by its shard, and its index there, too: the index a pack's
// recorded paths (or a user's own records) of that shard are kept by.
TEST(DecodeErrors, AShardSetsSampleIsNamedByItsShardAndItsIndexThere) {
  TempDir tmp;
  write_images(tmp.path("a.h5"), 5, {});
  write_images(tmp.path("b.h5"), 5, {1});
  for (const LoaderRun& run : kRuns) {
    SCOPED_TRACE(run.workers);
    Options o = options_for(tmp.path("*.h5"), run);
    o.shuffle = false;
    const std::string named = tmp.path("b.h5") + ": field 'jpeg', sample 1 (sample 6 of the shard set): corrupt JPEG";
    expect_error(ErrorCode::dataset,
                 [&] {
                   Loader loader(o);
                   for (Batch& b : loader.epoch(0)) (void)b;
                 },
                 {named});
    o.on_decode_error = OnDecodeError::skip;
    std::vector<std::string> warnings;
    o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
    Loader loader(o);
    for (Batch& b : loader.epoch(0)) (void)b;
    EXPECT_THAT(loader.stats().skipped_indices, ElementsAre(6u));
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_THAT(warnings[0], HasSubstr(named));
  }
}

// Each sample is counted and listed however many of a batch are skipped; past kMaxSkippedIndices
// they are counted only, and one warning says so.
TEST(DecodeErrors, EverySkippedSampleIsCountedAndTheFirstThousandAreListed) {
  TempDir tmp;
  const std::string p = tmp.path("junk.h5");
  const std::uint64_t n = kMaxSkippedIndices + 24;
  {
    std::vector<Bytes> junk(n, Bytes(40, std::byte{'x'}));  // not an image: refused from its first bytes
    test::H5Builder f(p);
    f.vlen("jpeg", junk);
  }
  for (const LoaderRun& run : kRuns) {
    SCOPED_TRACE(run.workers);
    Options o = options_for(p, run);
    o.shuffle = false;
    o.batch_size = 256;
    o.on_decode_error = OnDecodeError::skip;
    std::vector<std::string> warnings;
    o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
    Loader loader(o);
    std::uint64_t skipped = 0;
    for (Batch& b : loader.epoch(0)) {
      ASSERT_EQ(b.skipped().size(), b.size());
      for (std::size_t k = 0; k < b.size(); ++k) EXPECT_EQ(b.skipped()[k], k);
      skipped += b.skipped().size();
    }
    EXPECT_EQ(skipped, n);
    const Stats s = loader.stats();
    EXPECT_EQ(s.skipped_samples, n);
    std::vector<std::uint64_t> first(kMaxSkippedIndices);
    std::iota(first.begin(), first.end(), 0);
    EXPECT_EQ(s.skipped_indices, first);
    ASSERT_EQ(warnings.size(), kMaxSkippedIndices + 1);
    EXPECT_THAT(warnings[0], HasSubstr(p + ": field 'jpeg', sample 0: not a JPEG or PNG image (40 bytes"));
    // A batch's notes hold the reasons of its first few dozen samples; the others say theirs was cut.
    EXPECT_THAT(warnings[255], HasSubstr(p + ": sample 255: skipped (Options::on_decode_error = "
                                             "OnDecodeError::skip): a field holds zeros (batch 0 of epoch 0, position "
                                             "255); the decoder's reason was cut"));
    EXPECT_THAT(warnings.back(), HasSubstr("more than 1000 samples were skipped"));
  }
}

// A user operation that fails as the operating system would: not the sample's fault.
OpSpec same_spec(const OpSpec& in, std::span<const double>) { return in; }
void fails_io(const SampleIn&, SampleOut&, std::span<const double>, SampleRandom&) {
  throw Error(ErrorCode::io, "reading a side file: Input/output error (EIO)");
}
STOKER_REGISTER_OP(fails_io, same_spec, fails_io);

TEST(DecodeErrors, OnlyASamplesOwnFaultIsSkipped) {
  TempDir tmp;
  const std::string p = tmp.path("good.h5");
  write_images(p, 4, {});
  for (const LoaderRun& run : kRuns) {
    SCOPED_TRACE(run.workers);
    Options o = options_for(p, run);
    o.pipeline = "jpeg=decode(24,32),fails_io";
    o.on_decode_error = OnDecodeError::skip;
    expect_error(ErrorCode::io, [&] { Loader(o).epoch(0).next(); },
                 {p + ": field 'jpeg', sample ", ": reading a side file: Input/output error (EIO)"});
  }
}

// die_once(v) on an i64 field passes its samples through, except that the first process to meet
// value v kills itself there (SIGKILL), as the OOM killer would: which process that is, is decided
// by creating the file named by $STOKER_TEST_DIE_MARKER (O_EXCL), so a replacement goes on.
constexpr const char* kDieMarkerEnv = "STOKER_TEST_DIE_MARKER";
void die_once(const SampleIn& in, SampleOut& out, std::span<const double> args, SampleRandom&) {
  std::int64_t v;
  std::memcpy(&v, in.data.data(), sizeof v);
  std::memcpy(out.resize(in.dtype, {}), &v, sizeof v);
  const char* marker = std::getenv(kDieMarkerEnv);
  if (!marker || v != static_cast<std::int64_t>(args[0])) return;
  const int fd = ::open(marker, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;  // a process died here already
  ::close(fd);
  ::kill(::getpid(), SIGKILL);
}
STOKER_REGISTER_OP(die_once, same_spec, die_once);

// A worker killed while it loads the batch holding a skipped sample is replaced, and the batch
// loaded again: the sample is delivered once, counted once and warned of once.
TEST(DecodeErrors, ASkippedSampleIsCountedOnceWhenItsWorkerDiesAndIsReplaced) {
  TempDir tmp;
  const std::string good = tmp.path("good.h5"), bad = tmp.path("bad.h5");
  write_images(good, 10, {});
  write_images(bad, 10, {6});
  for (const LoaderRun& run : kRuns) {
    if (run.workers == 0) continue;  // the op would kill the test itself
    SCOPED_TRACE(run.device.str());
    const std::string marker = tmp.path("died-" + run.device.str());
    ::setenv(kDieMarkerEnv, marker.c_str(), 1);
    Options o = options_for(bad, run);
    o.pipeline += ";label=die_once(6)";
    o.on_decode_error = OnDecodeError::skip;
    std::vector<std::string> warnings;
    o.on_warning = [&](std::string_view w) { warnings.emplace_back(w); };
    Loader reference(reference_options(good, run)), loader(o);
    Epoch ref = reference.epoch(0);
    std::uint64_t batches = 0;
    for (Batch& b : loader.epoch(0)) {
      std::optional<Batch> r = ref.next();
      ASSERT_TRUE(r.has_value());
      ++batches;
      ASSERT_EQ(std::vector<std::uint64_t>(b.indices().begin(), b.indices().end()),
                std::vector<std::uint64_t>(r->indices().begin(), r->indices().end()));
      EXPECT_EQ(host_copy(b, 1), host_copy(*r, 1));
      const auto six = std::find(b.indices().begin(), b.indices().end(), 6u);
      if (six == b.indices().end()) {
        EXPECT_TRUE(b.skipped().empty());
      } else {
        EXPECT_THAT(std::vector<std::uint32_t>(b.skipped().begin(), b.skipped().end()),
                    ElementsAre(static_cast<std::uint32_t>(six - b.indices().begin())));
      }
    }
    ::unsetenv(kDieMarkerEnv);
    EXPECT_TRUE(std::filesystem::exists(marker)) << "a worker died";
    EXPECT_EQ(batches, 3u);
    const Stats s = loader.stats();
    EXPECT_EQ(s.respawns, 1u);
    EXPECT_EQ(s.samples, 10u);
    EXPECT_EQ(s.skipped_samples, 1u) << "counted once, at its delivery";
    EXPECT_THAT(s.skipped_indices, ElementsAre(6u));
    std::vector<std::string> skips;
    for (const std::string& w : warnings) {
      if (w.find("skipped (") != std::string::npos) skips.push_back(w);
    }
    ASSERT_EQ(skips.size(), 1u) << ::testing::PrintToString(warnings);
    EXPECT_THAT(skips[0], HasSubstr(bad + ": field 'jpeg', sample 6: corrupt JPEG"));
    EXPECT_EQ(warnings.size(), 2u) << "and one for the worker replaced: " << ::testing::PrintToString(warnings);
    const auto replaced = std::find_if(warnings.begin(), warnings.end(),
                                       [](const std::string& w) { return w.find("replaced by pid") != w.npos; });
    ASSERT_NE(replaced, warnings.end());
    EXPECT_THAT(*replaced, HasSubstr("while loading sample 6 of " + bad + " (batch ")) << "the sample it died on";
  }
}

TEST(DecodeErrors, AnUnknownPolicyIsRefused) {
  Options o;
  o.source = "anything.h5";
  o.on_decode_error = static_cast<OnDecodeError>(7);
  expect_error(ErrorCode::invalid_option, [&] { Loader l(o); },
               {"options: Options::on_decode_error is 7, neither OnDecodeError::fail nor OnDecodeError::skip"});
}

}  // namespace
}  // namespace stoker
