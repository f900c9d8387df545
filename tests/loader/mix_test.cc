// Weighted mixes (Options::mix): several datasets drawn by weight, their samples delivered exactly,
// each epoch going on where the last stopped, the state recording each source's draws and resuming
// exactly for another rank count, batch size and worker count; a source of other fields, a bad
// weight or an order a mix does not offer are errors naming them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <vector>

#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

using ::testing::HasSubstr;

// Two sources of small_schema: "web" a directory of two shards (30 + 18 samples), "books" one file
// (20 samples): global samples [0, 48) are web's, [48, 68) books'.
struct MixFiles {
  TempDir tmp;
  std::string web, books;
  MixFiles() {
    std::filesystem::create_directories(tmp.path("web"));
    write_hdf5(tmp.path("web/web-0.h5"), small_schema(30), {});
    write_lmdb(tmp.path("web/web-1.lmdb"), small_schema(18));
    write_hdf5(tmp.path("books.h5"), small_schema(20), {});
    web = tmp.path("web");
    books = tmp.path("books.h5");
  }
  // Global sample g as its file's own index.
  static std::uint64_t local(std::uint64_t g) { return g < 30 ? g : g < 48 ? g - 30 : g - 48; }
  static bool is_web(std::uint64_t g) { return g < 48; }
};

Options mix_options(const MixFiles& f, std::size_t workers, std::size_t batch_size = 8) {
  Options o;
  o.mix = {{f.web, 3}, {f.books, 1}};
  o.samples_per_epoch = 64;
  o.shuffle = true;
  o.seed = 11;
  o.batch_size = batch_size;
  o.num_workers = workers;
  return o;
}

// Every sample of the epoch checked against its file's generator; the global indices in order.
std::vector<std::uint64_t> read_epoch(Loader& loader, std::uint64_t epoch, std::size_t max_batches = SIZE_MAX) {
  const Schema schema = small_schema(1);
  std::vector<std::uint64_t> order;
  auto ep = loader.epoch(epoch);
  for (std::size_t b = 0; b < max_batches; ++b) {
    std::optional<Batch> batch = ep.next();
    if (!batch) break;
    for (std::size_t f = 0; f < schema.fields.size(); ++f) {
      for (std::size_t i = 0; i < batch->size(); ++i) {
        const std::uint64_t g = batch->indices()[i];
        const auto want = expected_field(schema.fields[f], MixFiles::local(g));
        EXPECT_EQ(0, std::memcmp(batch->fields()[f].data + i * want.size(), want.data(), want.size()))
            << "field " << schema.fields[f].name << ", sample " << g;
      }
    }
    order.insert(order.end(), batch->indices().begin(), batch->indices().end());
  }
  return order;
}

TEST(Mix, SourcesAreDrawnByWeightEachPassEverySampleOnceAndEpochsGoOn) {
  MixFiles f;
  std::vector<std::uint64_t> first;
  for (std::size_t workers : {0u, 2u}) {
    Loader loader(mix_options(f, workers));
    EXPECT_EQ(loader.batches_per_epoch(), 8u);
    std::vector<std::uint64_t> all;
    for (std::uint64_t e = 0; e < 4; ++e) {
      const auto epoch = read_epoch(loader, e);
      ASSERT_EQ(epoch.size(), 64u);
      // Three web draws to one of books in every four.
      for (std::size_t p = 0; p < epoch.size(); p += 4)
        EXPECT_EQ(std::count_if(epoch.begin() + p, epoch.begin() + p + 4, MixFiles::is_web), 3) << "at " << p;
      all.insert(all.end(), epoch.begin(), epoch.end());
    }
    if (first.empty()) {
      first = all;
    } else {
      EXPECT_EQ(all, first) << "another order with " << workers << " workers";
    }
    // Each source's draws, across the epochs, are passes each holding every one of its samples.
    for (bool web : {true, false}) {
      std::vector<std::uint64_t> draws;
      std::copy_if(all.begin(), all.end(), std::back_inserter(draws),
                   [&](std::uint64_t g) { return MixFiles::is_web(g) == web; });
      const std::uint64_t n = web ? 48 : 20, start = web ? 0 : 48;
      ASSERT_EQ(draws.size(), web ? 192u : 64u);
      for (std::size_t q = 0; q + n <= draws.size(); q += n) {
        std::vector<std::uint64_t> pass(draws.begin() + q, draws.begin() + q + n), every(n);
        std::sort(pass.begin(), pass.end());
        std::iota(every.begin(), every.end(), start);
        EXPECT_EQ(pass, every) << (web ? "web" : "books") << " pass from draw " << q;
      }
    }
    // The state after an epoch counts each source's draws since the first.
    EXPECT_EQ(loader.state().drawn, (std::vector<std::uint64_t>{192, 64}));
  }
}

TEST(Mix, AResumeInTheMiddleDeliversTheRestOnceForAnyRanksBatchSizeAndWorkers) {
  MixFiles f;
  std::vector<std::uint64_t> whole;
  {
    Loader loader(mix_options(f, 0));
    whole = read_epoch(loader, 1);
  }
  Loader first(mix_options(f, 2));
  const std::vector<std::uint64_t> before = read_epoch(first, 1, 3);
  const LoaderState state = first.state();
  EXPECT_EQ(state.consumed, 24u);
  // Epoch 0 drew 48 of web and 16 of books; epoch 1's first 24 draws 18 and 6 more.
  EXPECT_EQ(state.drawn, (std::vector<std::uint64_t>{66, 22}));
  const std::string saved = state.to_json();
  EXPECT_THAT(saved, HasSubstr("\"drawn\":[66,22]"));
  EXPECT_THAT(saved, HasSubstr("\"order\":\"mix(random;3:48,1:20)\""));

  // Two ranks, batch size 5, one with workers and one without.
  std::vector<std::uint64_t> after(whole.size() - before.size());
  for (std::uint32_t rank : {0u, 1u}) {
    Options o = mix_options(f, rank == 0 ? 2 : 0, 5);
    o.shard = {rank, 2};
    Loader resumed(o);
    std::vector<std::uint64_t> got;
    for (Batch& b : resumed.epoch(LoaderState::from_json(saved)))
      got.insert(got.end(), b.indices().begin(), b.indices().end());
    ASSERT_EQ(got.size(), 20u);
    for (std::size_t k = 0; k < got.size(); ++k) after[rank + 2 * k] = got[k];
  }
  std::vector<std::uint64_t> joined = before;
  joined.insert(joined.end(), after.begin(), after.end());
  EXPECT_EQ(joined, whole);
}

TEST(Mix, AStateOfAnotherMixOrEditedIsRefused) {
  MixFiles f;
  Loader loader(mix_options(f, 0));
  (void)read_epoch(loader, 0, 2);
  const std::string saved = loader.state().to_json();
  Options reweighted = mix_options(f, 0);
  reweighted.mix[1].weight = 2;
  Loader other(reweighted);
  expect_error(ErrorCode::state_mismatch, [&] { (void)other.epoch(LoaderState::from_json(saved)); },
               {"order mix(random;3:48,1:20) in the state, mix(random;3:48,2:20) here"});
  std::string edited = saved;
  edited.replace(edited.find("[12,4]"), 6, "[13,3]");
  expect_error(ErrorCode::state_mismatch, [&] { (void)LoaderState::from_json(edited); },
               {"the fingerprint", "does not match"});
}

TEST(Mix, ASequentialMixResumesWhateverTheSeed) {
  MixFiles f;
  Options o = mix_options(f, 0);
  o.shuffle = false;
  Loader loader(o);
  (void)read_epoch(loader, 0, 3);
  const std::string saved = loader.state().to_json();
  o.seed = 99;
  Loader other(o);
  std::uint64_t rest = 0;
  for (Batch& b : other.epoch(LoaderState::from_json(saved))) rest += b.size();
  EXPECT_EQ(rest, 40u);
}

TEST(Mix, ASourceOfOtherFieldsIsAnErrorNamingItAndTheDifference) {
  MixFiles f;
  Schema other = small_schema(10);
  other.fields[1].dtype = DType::i32;
  const std::string odd = f.tmp.path("odd.h5");
  write_hdf5(odd, other, {});
  Options o = mix_options(f, 2);
  o.mix.push_back({odd, 1});
  expect_error(ErrorCode::dataset, [&] { Loader l(o); }, {odd + ": shard 3 of 4 has fields", "label: i32[]"});
}

TEST(Mix, OptionsAMixCannotTakeAreErrorsNamingThem) {
  MixFiles f;
  Options both = mix_options(f, 0);
  both.source = f.books;
  expect_error(ErrorCode::invalid_option, [&] { Loader l(both); },
               {"both Options::mix (2 entries) and Options::source are set"});
  Options quasi = mix_options(f, 0);
  quasi.order = Order::quasi_random;
  expect_error(ErrorCode::invalid_option, [&] { Loader l(quasi); }, {"quasi_random, which a mix does not offer"});
  Options weightless = mix_options(f, 0);
  weightless.mix[0].weight = 0;
  expect_error(ErrorCode::invalid_option, [&] { Loader l(weightless); },
               {"Options::mix[0] ('" + f.web + "') has weight 0"});
  Options plain;
  plain.source = f.books;
  plain.samples_per_epoch = 10;
  expect_error(ErrorCode::invalid_option, [&] { Loader l(plain); },
               {"Options::samples_per_epoch is 10, but there is no mix"});
  Options endless = mix_options(f, 0);
  endless.samples_per_epoch = (std::uint64_t{1} << 63) + 1;
  expect_error(ErrorCode::invalid_option, [&] { Loader l(endless); },
               {"Options::samples_per_epoch is 9223372036854775809, more than 2^63"});
  Options late = mix_options(f, 0);
  late.samples_per_epoch = std::uint64_t{1} << 62;
  Loader far(late);
  expect_error(ErrorCode::invalid_option, [&] { (void)far.epoch(4); }, {"starts past draw 2^64"});
  // A glob whose matches hold a directory of shards: an error, never its shards taken for another
  // source's.
  std::filesystem::create_directories(f.tmp.path("nest/sub"));
  write_hdf5(f.tmp.path("nest/a.h5"), small_schema(4), {});
  write_hdf5(f.tmp.path("nest/sub/s0.h5"), small_schema(2), {});
  Options nested = mix_options(f, 0);
  nested.mix[0].path = f.tmp.path("nest/*");
  expect_error(ErrorCode::dataset, [&] { Loader l(nested); }, {f.tmp.path("nest/sub")});
  Options empty = mix_options(f, 0);
  std::filesystem::create_directories(f.tmp.path("none"));
  empty.mix.push_back({f.tmp.path("none"), 1});
  expect_error(ErrorCode::dataset, [&] { Loader l(empty); }, {f.tmp.path("none")});
}

}  // namespace
}  // namespace stoker::test
