// A weighted mix's order (loader/plan/mix_order.h, docs/sampler.md "Mixes"): the weights made
// integers, each period drawing every source exactly its weight, each pass of a source every one of
// its samples once, the proportions over a long run, and the draws counted per source.
#include "loader/plan/mix_order.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "loader/plan/sampler.h"
#include "loader/plan/shuffle.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::uint64_t> weights_of(std::vector<double> weights) {
  std::vector<Source> sources;
  for (double w : weights) sources.push_back(Source{"data.h5", w});
  return mix_weights(sources);
}

// The source that holds global sample g of sources of `samples`.
std::size_t source_of(const MixTable& t, std::uint64_t g) {
  for (std::size_t s = 0; s < t.members().size(); ++s)
    if (g >= t.members()[s].first && g < t.members()[s].first + t.members()[s].samples) return s;
  ADD_FAILURE() << "sample " << g << " is in no source";
  return 0;
}

TEST(MixWeights, WholeWeightsAreKeptReducedAndOthersScaledToTheResolution) {
  EXPECT_THAT(weights_of({3, 1}), ElementsAre(3, 1));
  EXPECT_THAT(weights_of({2, 4, 6}), ElementsAre(1, 2, 3));
  EXPECT_THAT(weights_of({0.5, 0.5}), ElementsAre(1, 1));
  // 0.7 * 65536 = 45875.2, 0.3 * 65536 = 19660.8.
  EXPECT_THAT(weights_of({0.7, 0.3}), ElementsAre(45875, 19661));
  // A weight too small for the resolution still draws, once a period.
  EXPECT_THAT(weights_of({1e-9, 1}), ElementsAre(1, 65536));
  // Whole weights past the resolution are scaled too.
  EXPECT_THAT(weights_of({100000, 100000}), ElementsAre(1, 1));
}

TEST(MixWeights, AWeightThatIsNotAPositiveNumberIsAnErrorNamingItsSource) {
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    std::vector<Source> sources{{"a.h5", 1}, {"books/", bad}};
    try {
      (void)mix_weights(sources);
      ADD_FAILURE() << "weight " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_option);
      EXPECT_THAT(e.what(), HasSubstr("Options::mix[1] ('books/') has weight"));
    }
  }  // Finite weights whose sum is not: named, never cast from infinity.
  std::vector<Source> huge{{"a.h5", 1}, {"web/", 1.7e308}, {"books/", 1.7e308}};
  try {
    (void)mix_weights(huge);
    ADD_FAILURE() << "an infinite sum accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Options::mix[1] ('web/') has weight 1.7e+308, too large for the weights' sum"));
  }
}

TEST(MixTable, APeriodIsTheSmoothWeightedRoundRobin) {
  // 3:1: credits (3,1) draw 0, (2,2) draw 0 (the first of equals), (1,3) draw 1, (4,0) draw 0.
  const MixTable t({3, 1}, {100, 100}, Order::sequential, 0);
  std::vector<std::size_t> drawn;
  for (std::uint64_t p = 0; p < 8; ++p) drawn.push_back(source_of(t, t.sample(p)));
  EXPECT_THAT(drawn, ElementsAre(0, 0, 1, 0, 0, 0, 1, 0));
  // Sequential: source s's k-th draw is its sample k mod n_s.
  EXPECT_EQ(t.sample(0), 0u);
  EXPECT_EQ(t.sample(1), 1u);
  EXPECT_EQ(t.sample(2), 100u);
  EXPECT_EQ(t.sample(6), 101u);
}

TEST(MixTable, EveryPeriodDrawsEachSourceItsWeightAndDrawnCountsThem) {
  const std::vector<std::uint64_t> weights{5, 2, 3, 1};
  const MixTable t(weights, {7, 3, 11, 2}, Order::random, 9);
  ASSERT_EQ(t.period(), 11u);
  std::vector<std::uint64_t> counted(weights.size(), 0);
  for (std::uint64_t p = 0; p <= 5 * t.period(); ++p) {
    ASSERT_EQ(t.drawn(p), counted) << "position " << p;
    if (p % t.period() == 0) {
      for (std::size_t s = 0; s < weights.size(); ++s) EXPECT_EQ(counted[s], p / t.period() * weights[s]);
    }
    ++counted[source_of(t, t.sample(p))];
  }
}

TEST(MixTable, EachPassOfASourceDrawsEverySampleOnceInANewShuffle) {
  const MixTable t({2, 1}, {50, 30}, Order::random, 4);
  std::vector<std::vector<std::uint64_t>> draws(2);
  for (std::uint64_t p = 0; p < 600; ++p) {
    const std::uint64_t g = t.sample(p);
    draws[source_of(t, g)].push_back(g);
  }
  for (std::size_t s = 0; s < 2; ++s) {
    const auto& m = t.members()[s];
    const std::uint64_t passes = draws[s].size() / m.samples;
    ASSERT_GE(passes, 3u);
    std::vector<std::vector<std::uint64_t>> seen;
    for (std::uint64_t q = 0; q < passes; ++q) {
      std::vector<std::uint64_t> pass(draws[s].begin() + q * m.samples, draws[s].begin() + (q + 1) * m.samples);
      seen.push_back(pass);
      std::sort(pass.begin(), pass.end());
      std::vector<std::uint64_t> every(m.samples);
      std::iota(every.begin(), every.end(), m.first);
      EXPECT_EQ(pass, every) << "source " << s << ", pass " << q;
      // The pass is the source's permutation for (its stream, the pass).
      const auto perm = permutation(m.samples, m.stream, q);
      for (std::uint64_t i = 0; i < m.samples; ++i) EXPECT_EQ(seen[q][i], m.first + perm[i]);
    }
    EXPECT_NE(seen[0], seen[1]);
  }
}

TEST(MixTable, EverySourceStaysWithinOneDrawOfItsShareAtEveryPosition) {
  const std::vector<double> given{0.7, 0.2, 0.1};
  const std::vector<std::uint64_t> w = weights_of(given);
  const MixTable t(w, {1000, 1000, 1000}, Order::random, 1);
  const double total = static_cast<double>(std::accumulate(w.begin(), w.end(), std::uint64_t{0}));
  std::vector<std::uint64_t> count(w.size(), 0);
  constexpr std::uint64_t kDraws = 1'000'000;
  for (std::uint64_t p = 1; p <= kDraws; ++p) {
    ++count[source_of(t, t.sample(p - 1))];
    if (p % 997 != 0 && p != kDraws) continue;
    for (std::size_t s = 0; s < w.size(); ++s) {
      ASSERT_LT(std::abs(static_cast<double>(count[s]) - static_cast<double>(p) * static_cast<double>(w[s]) / total),
                1.0)
          << "source " << s << " after " << p << " draws";
    }
  }
  // And the integer weights are the given ones within the resolution.
  for (std::size_t s = 0; s < w.size(); ++s)
    EXPECT_NEAR(static_cast<double>(count[s]) / kDraws, given[s], 1.0 / static_cast<double>(kMixResolution));
}

TEST(MixTable, EpochsGoOnWhereThePreviousOneStopped) {
  auto table = std::make_shared<const MixTable>(std::vector<std::uint64_t>{3, 1}, std::vector<std::uint64_t>{9, 5},
                                                Order::random, 2);
  const Sampler sampler(20, 4, Order::random, 2, {}, false, 1, {9, 5}, table);
  EXPECT_EQ(sampler.order_description(), "mix(random;3:9,1:5)");
  for (std::uint64_t e = 0; e < 3; ++e) {
    const auto order = sampler.epoch_order(e);
    ASSERT_EQ(order.size(), 20u);
    for (std::uint64_t i = 0; i < 20; ++i) EXPECT_EQ(order[i], table->sample(e * 20 + i));
    EXPECT_EQ(sampler.mix_drawn(e, 20), table->drawn((e + 1) * 20));
  }
}

}  // namespace
}  // namespace stoker::detail
