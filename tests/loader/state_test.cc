// Checkpoint and resume: Loader::state() and Loader::epoch(state), across changes of world size,
// batch size, worker count and device.
#include "stoker/state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "loader/plan/sampler.h"
#include "loader/plan/shuffle.h"
#include "stoker/loader.h"
#include "tests/support/test_data.h"

namespace stoker::test {
namespace {

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    schema_ = small_schema(kSamples);
    write_lmdb(tmp_.path("d.lmdb"), schema_);
  }
  Options options(std::uint32_t rank, std::uint32_t world, std::size_t batch, std::size_t workers) {
    Options o;
    o.source = tmp_.path("d.lmdb");
    o.batch_size = batch;
    o.num_workers = workers;
    o.shuffle = true;
    o.seed = 11;
    o.shard = Shard{rank, world};
    return o;
  }
  // Runs `batches` batches (all when 0) of the epoch on every rank of `world`, from `state` when
  // given; returns the samples delivered by each rank (checking every sample's bytes) and the state
  // of each rank afterwards.
  struct Run {
    std::vector<std::vector<std::uint64_t>> samples;
    std::vector<LoaderState> states;
  };
  Run run(std::uint32_t world, std::size_t batch, std::size_t workers, std::uint64_t batches,
          const std::optional<LoaderState>& state, std::uint64_t epoch = 2) {
    Run out;
    for (std::uint32_t r = 0; r < world; ++r) {
      Loader loader(options(r, world, batch, workers));
      Epoch e = state ? loader.epoch(*state) : loader.epoch(epoch);
      std::vector<std::uint64_t> mine;
      for (std::uint64_t b = 0; batches == 0 || b < batches; ++b) {
        auto got = e.next();
        if (!got) break;
        for (std::size_t k = 0; k < got->size(); ++k) {
          const std::uint64_t i = got->indices()[k];
          auto want = expected_field(schema_.fields[1], i);
          EXPECT_EQ(0, std::memcmp((*got)["label"].data + 8 * k, want.data(), 8)) << "sample " << i;
          mine.push_back(i);
        }
      }
      out.samples.push_back(std::move(mine));
      out.states.push_back(loader.state());
    }
    return out;
  }
  static constexpr std::uint64_t kSamples = 120;
  TempDir tmp_;
  Schema schema_;
};

TEST_F(Resume, ElasticResumeDeliversExactlyTheRestOnce) {
  // 3 ranks, batch 4, 2 workers: 5 batches each (60 of 120 samples), then stop.
  Run first = run(3, 4, 2, 5, std::nullopt);
  for (const auto& s : first.states) EXPECT_EQ(s, first.states[0]) << "every rank must have the same state";
  const LoaderState state = first.states[0];
  EXPECT_EQ(state.epoch, 2u);
  EXPECT_EQ(state.consumed, 60u);
  EXPECT_FALSE(state.epoch_finished);
  // The state crosses a file as JSON.
  const LoaderState saved = LoaderState::from_json(state.to_json());
  EXPECT_EQ(saved, state);

  // Resume on 2 ranks, batch 6, no workers.
  Run second = run(2, 6, 0, 0, saved);
  for (const auto& s : second.states) {
    EXPECT_EQ(s.consumed, kSamples);
    EXPECT_TRUE(s.epoch_finished);
  }
  std::multiset<std::uint64_t> all;
  for (const auto& v : first.samples) all.insert(v.begin(), v.end());
  for (const auto& v : second.samples) all.insert(v.begin(), v.end());
  std::multiset<std::uint64_t> epoch;
  for (std::uint64_t i = 0; i < kSamples; ++i) epoch.insert(i);
  EXPECT_EQ(all, epoch) << "every sample exactly once across the stop";
  // And the resumed part is the rest of the epoch's global order, interleaved across the new ranks.
  const auto order = detail::permutation(kSamples, 11, 2);
  for (std::size_t k = 0; k < second.samples[0].size(); ++k) {
    EXPECT_EQ(second.samples[0][k], order[60 + 2 * k]);
    EXPECT_EQ(second.samples[1][k], order[61 + 2 * k]);
  }
}

TEST_F(Resume, UnevenSharesArePaddedLikeDistributedSampler) {
  // 4 ranks of batch 5 stop after 4 batches: 80 of 120 consumed. 3 ranks resume: the 40 left are
  // padded to 3 x 14 by wrapping around the remainder (its first 2 samples again).
  Run first = run(4, 5, 1, 4, std::nullopt);
  EXPECT_EQ(first.states[0].consumed, 80u);
  Run second = run(3, 7, 2, 0, first.states[0]);
  const auto order = detail::permutation(kSamples, 11, 2);
  std::multiset<std::uint64_t> want(order.begin() + 80, order.end());
  want.insert(order[80]);
  want.insert(order[81]);
  std::multiset<std::uint64_t> got;
  for (const auto& v : second.samples) {
    EXPECT_EQ(v.size(), 14u) << "every rank gets the same number of samples";
    got.insert(v.begin(), v.end());
  }
  EXPECT_EQ(got, want);
  std::set<std::uint64_t> before;
  for (const auto& v : first.samples) before.insert(v.begin(), v.end());
  std::set<std::uint64_t> all(before);
  all.insert(got.begin(), got.end());
  EXPECT_EQ(before.size(), 80u);
  EXPECT_EQ(all.size(), kSamples);
}

TEST_F(Resume, AStagedDeviceCountsOnlyWhatTheUserReceived) {
  Options o = options(0, 2, 4, 2);
  o.device = Device::emulated();
  o.prefetch_to_device = 3;  // the staging thread runs ahead of the user
  Loader loader(o);
  Epoch e = loader.epoch(0);
  for (int b = 0; b < 3; ++b) ASSERT_TRUE(e.next());
  EXPECT_EQ(loader.state().consumed, 3u * 4 * 2);
  EXPECT_EQ(loader.state().epoch, 0u);
}

TEST_F(Resume, AStateForAnotherOrderOrAFinishedEpochIsRefused) {
  Run first = run(1, 10, 0, 3, std::nullopt);
  LoaderState state = first.states[0];
  {
    Options o = options(0, 1, 10, 0);
    o.seed = 12;
    Loader loader(o);
    expect_error(ErrorCode::state_mismatch, [&] { loader.epoch(state); }, {"seed 11 in the state, 12 here"});
  }
  {
    Options o = options(0, 1, 10, 0);
    o.fields = {"label"};
    Loader loader(o);
    expect_error(ErrorCode::state_mismatch, [&] { loader.epoch(state); },
                 {"fields 'image: u8[3,4,5], label: i64[], weight: f32[2]' in the state, 'label: i64[]' here"});
  }
  Run whole = run(1, 10, 0, 0, std::nullopt);
  EXPECT_TRUE(whole.states[0].epoch_finished);
  Loader loader(options(0, 1, 10, 0));
  expect_error(ErrorCode::state_mismatch, [&] { loader.epoch(whole.states[0]); },
               {"epoch 2 is finished (all its batches were delivered): start epoch 3"});
}

// The example of docs/sampler.md, fingerprint and all, is a state this stoker reads; so is the
// same state saved before shard sets (no "shards" key, the same fingerprint).
TEST(LoaderStateJson, TheDocumentedExampleIsAValidState) {
  const LoaderState s = LoaderState::from_json(
      R"({"stoker_state":2,"epoch":2,"consumed":210,"epoch_finished":false,"seed":3,"order":"random",
 "num_samples":1200,"fields":"image: u8[3,32,32], label: i64[]","shards":"","fingerprint":"161ded1c5c7475ec"})");
  EXPECT_EQ(s.consumed, 210u);
  EXPECT_EQ(s.fields, "image: u8[3,32,32], label: i64[]");
  EXPECT_EQ(LoaderState::from_json(s.to_json()), s);
  EXPECT_EQ(LoaderState::from_json(
                R"({"stoker_state":2,"epoch":2,"consumed":210,"epoch_finished":false,"seed":3,"order":"random",
 "num_samples":1200,"fields":"image: u8[3,32,32], label: i64[]","fingerprint":"161ded1c5c7475ec"})"),
            s);
  // A shard set's identity is part of what the fingerprint covers.
  LoaderState sharded = s;
  sharded.shards = "3 shards 0123456789abcdef";
  std::string text = sharded.to_json();
  EXPECT_EQ(LoaderState::from_json(text), sharded);
  text.replace(text.find("3 shards"), 1, "4");
  expect_error(ErrorCode::state_mismatch, [&] { LoaderState::from_json(text); }, {"does not match the contents"});
}

TEST(LoaderStateJson, EditedTruncatedOrForeignTextIsRefused) {
  LoaderState s;
  s.epoch = 4;
  s.consumed = 1000;
  s.seed = 7;
  s.order = "random";
  s.num_samples = 5000;
  s.fields = "image: u8[3,32,32], label: i64[]";
  const std::string json = s.to_json();
  EXPECT_EQ(LoaderState::from_json(json), s);
  std::string edited = json;
  edited.replace(edited.find("1000"), 4, "2000");
  expect_error(ErrorCode::state_mismatch, [&] { LoaderState::from_json(edited); }, {"edited or damaged"});
  expect_error(ErrorCode::state_mismatch, [&] { LoaderState::from_json(json.substr(0, json.size() / 2)); },
               {"truncated"});
  expect_error(ErrorCode::state_mismatch, [&] { LoaderState::from_json("{\"epoch\": 1}"); },
               {"not a stoker loader state"});
  std::string old = json;
  old.replace(old.find("\"stoker_state\":2"), 16, "\"stoker_state\":1");
  expect_error(ErrorCode::state_mismatch, [&] { LoaderState::from_json(old); },
               {"version 1", "Fisher-Yates", "start that epoch over"});
  std::string future = json;
  future.replace(future.find("\"stoker_state\":2"), 16, "\"stoker_state\":3");
  expect_error(ErrorCode::state_mismatch, [&] { LoaderState::from_json(future); }, {"version 3 is not the version 2"});
  std::string no_key = json;
  no_key.replace(no_key.find("\"seed\""), 6, "\"sead\"");
  expect_error(ErrorCode::state_mismatch, [&] { LoaderState::from_json(no_key); }, {"no 'seed'"});
}

}  // namespace
}  // namespace stoker::test
