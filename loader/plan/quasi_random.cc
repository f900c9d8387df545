#include "loader/plan/quasi_random.h"

#include <algorithm>
#include <cassert>

#include "base/splitmix64.h"

namespace stoker::detail {
namespace {

// Streams of their own, so that no shuffle here is the random order's permutation (docs/sampler.md).
constexpr std::uint64_t kGroupTag = 0x7175617369726e64ULL;  // "quasirnd": t = mix(seed ^ tag)
constexpr std::uint64_t kShardTag = 0x736861726473ULL;      // "shards": the shards' shuffle, mix(t ^ tag)
constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;    // block c's groups: seed t ^ (c · golden)

}  // namespace

QuasiRandomOrder::QuasiRandomOrder(std::uint64_t n, std::uint64_t group, std::uint32_t window_groups,
                                   std::uint64_t seed, std::uint64_t epoch,
                                   std::span<const std::uint64_t> shard_samples)
    : group_(std::max<std::uint64_t>(group, 1)),
      window_groups_(std::max<std::uint32_t>(window_groups, 1)),
      seed_(splitmix64_mix(seed ^ kGroupTag)),
      epoch_(epoch) {
  const std::uint64_t one_file[1] = {n};
  const std::span<const std::uint64_t> shards = shard_samples.size() > 1 ? shard_samples : std::span(one_file);
  std::vector<std::uint64_t> first_sample(shards.size());
  for (std::size_t s = 1; s < shards.size(); ++s) first_sample[s] = first_sample[s - 1] + shards[s - 1];
  assert(first_sample.back() + shards.back() == n && "the shards' samples are the dataset's");

  auto table = std::make_shared<Table>();
  const FeistelPermutation shard_order(shards.size(), splitmix64_mix(seed_ ^ kShardTag), epoch);
  std::uint64_t position = 0, window = 0;
  for (std::size_t first = 0, c = 0; first < shards.size(); first += kQuasiRandomInterleavedShards, ++c) {
    Block b;
    b.first_position = position;
    b.first_window = window;
    b.first_member = table->members.size();
    std::uint64_t groups = 0;
    for (std::size_t j = first; j < std::min<std::size_t>(first + kQuasiRandomInterleavedShards, shards.size()); ++j) {
      const std::size_t s = shards.size() > 1 ? shard_order(j) : 0;
      table->members.push_back(Member{first_sample[s], shards[s], groups});
      groups += (shards[s] + group_ - 1) / group_;
      position += shards[s];
    }
    b.num_members = table->members.size() - b.first_member;
    b.num_groups = groups;
    b.groups = FeistelPermutation(groups, seed_ ^ (c * kGolden), epoch);
    b.first_short = table->shorts.size();
    for (std::size_t k = b.first_member; k < table->members.size(); ++k) {
      const Member& m = table->members[k];
      const std::uint64_t last = m.samples % group_;
      if (last == 0) continue;
      const std::uint64_t listed = m.first_group + (m.samples - 1) / group_;
      table->shorts.push_back(ShortGroup{b.groups.inverse(listed) / window_groups_, group_ - last});
    }
    b.num_short = table->shorts.size() - b.first_short;
    std::sort(table->shorts.begin() + static_cast<std::ptrdiff_t>(b.first_short), table->shorts.end(),
              [](const ShortGroup& x, const ShortGroup& y) { return x.window < y.window; });
    window += (groups + window_groups_ - 1) / window_groups_;
    table->blocks.push_back(b);
  }
  table_ = std::move(table);
}

std::uint64_t QuasiRandomOrder::window_start(const Block& b, std::uint64_t w) const noexcept {
  // Every window holds K·G samples but the final one (fewer groups) and those holding a shard's
  // short last group: window w starts at w·K·G, less the deficits of the short groups before it.
  std::uint64_t start = w * window_groups_ * group_;
  for (std::size_t k = b.first_short; k < b.first_short + b.num_short && table_->shorts[k].window < w; ++k)
    start -= table_->shorts[k].deficit;
  return start;
}

std::uint64_t QuasiRandomOrder::operator()(std::uint64_t pos) const noexcept {
  const Table& t = *table_;
  const auto after = std::upper_bound(t.blocks.begin(), t.blocks.end(), pos,
                                      [](std::uint64_t p, const Block& b) { return p < b.first_position; });
  const Block& b = *(after - 1);
  const std::uint64_t local = pos - b.first_position;
  const std::uint64_t windows = (b.num_groups + window_groups_ - 1) / window_groups_;
  // Window starts are at most w·K·G and at least that less every deficit of the block (fewer than
  // its members · G), so the window is found in a few steps up from local / (K·G).
  std::uint64_t w = local / (window_groups_ * group_);
  while (w + 1 < windows && window_start(b, w + 1) <= local) ++w;
  const std::uint64_t start = window_start(b, w);
  const Member* members = t.members.data() + b.first_member;
  // Listed group g of the block: its shard, and the dataset's index of its first sample, and its size.
  auto locate = [&](std::uint64_t g, std::uint64_t& first) {
    std::size_t k = b.num_members - 1;
    while (members[k].first_group > g) --k;
    const std::uint64_t offset = (g - members[k].first_group) * group_;
    first = members[k].first_sample + offset;
    return std::min(group_, members[k].samples - offset);
  };
  const std::uint64_t first = w * window_groups_, last = std::min(first + window_groups_, b.num_groups);
  std::uint64_t size = 0, base = 0;
  for (std::uint64_t j = first; j < last; ++j) size += locate(b.groups(j), base);
  // The window's samples, listed group by group; its k-th is listed sample q(k).
  std::uint64_t q = FeistelPermutation(size, splitmix64_mix(seed_ ^ (b.first_window + w + 1)), epoch_)(local - start);
  for (std::uint64_t j = first;; ++j) {
    const std::uint64_t s = locate(b.groups(j), base);
    if (q < s) return base + q;
    q -= s;
  }
}

std::vector<std::uint64_t> quasi_random_order(std::uint64_t n, std::uint64_t group, std::uint32_t window_groups,
                                              std::uint64_t seed, std::uint64_t epoch,
                                              std::span<const std::uint64_t> shard_samples) {
  const QuasiRandomOrder order(n, group, window_groups, seed, epoch, shard_samples);
  std::vector<std::uint64_t> out(n);
  for (std::uint64_t i = 0; i < n; ++i) out[i] = order(i);
  return out;
}

}  // namespace stoker::detail
