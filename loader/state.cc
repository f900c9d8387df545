#include "stoker/state.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>

#include <nlohmann/json.hpp>
#include <type_traits>

#include "base/json_numbers.h"
#include "base/untrusted_json.h"
#include "stoker/error.h"

namespace stoker {
namespace {

// 2: positions are those of the per-position Feistel permutation (docs/sampler.md). A version 1
// state counted positions of the Fisher-Yates order that came before, which mean other samples.
constexpr int kStateVersion = 2;

// XXH64 (seed 0) of the canonical line "v2|epoch|consumed|finished|seed|order|num_samples|fields",
// followed by "|shards" for a shard set (a state of one file reads as it did before shard sets)
// and "|drawn=a,b,..." for a mix.
std::string fingerprint(const LoaderState& s) {
  std::string canonical = fmt::format("v{}|{}|{}|{}|{}|{}|{}|{}", kStateVersion, s.epoch, s.consumed,
                                      s.epoch_finished ? 1 : 0, s.seed, s.order, s.num_samples, s.fields);
  if (!s.shards.empty()) canonical += "|" + s.shards;
  if (!s.drawn.empty()) canonical += fmt::format("|drawn={}", fmt::join(s.drawn, ","));
  return fmt::format("{:016x}", XXH64(canonical.data(), canonical.size(), 0));
}

// A mix's draws per source: a list of whole numbers.
void get_drawn(const nlohmann::json& list, std::vector<std::uint64_t>& out) {
  if (!list.is_array())
    throw Error(ErrorCode::state_mismatch,
                fmt::format("loader state: 'drawn' is {}, not a list of numbers", detail::show_json(list)));
  for (const auto& v : list) {
    const auto n = detail::json_integer<std::uint64_t>(v);
    if (!n)
      throw Error(ErrorCode::state_mismatch,
                  fmt::format("loader state: 'drawn' holds {}, not a whole number in range", detail::show_json(v)));
    out.push_back(*n);
  }
}

}  // namespace

std::string LoaderState::to_json() const {
  nlohmann::json j = {{"stoker_state", kStateVersion},    {"epoch", epoch},   {"consumed", consumed},
                      {"epoch_finished", epoch_finished}, {"seed", seed},     {"order", order},
                      {"num_samples", num_samples},       {"fields", fields}, {"shards", shards},
                      {"fingerprint", fingerprint(*this)}};
  if (!drawn.empty()) j["drawn"] = drawn;
  return j.dump();
}

LoaderState LoaderState::from_json(std::string_view text) {
  nlohmann::json j;
  try {
    j = detail::parse_untrusted_json(text, detail::JsonLimits{1u << 20, 8});
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorCode::state_mismatch,
                fmt::format("loader state: not JSON ({}); was the file truncated?", e.what()));
  }
  if (!j.is_object() || !j.contains("stoker_state"))
    throw Error(ErrorCode::state_mismatch, "loader state: not a stoker loader state");
  if (j["stoker_state"] == 1) {
    throw Error(ErrorCode::state_mismatch,
                "loader state: version 1 was saved by a stoker whose random and quasi-random orders were a "
                "Fisher-Yates shuffle; this stoker's orders are a per-position permutation (state version 2), so "
                "its positions name other samples and the epoch cannot be resumed: start that epoch over with "
                "Loader::epoch(epoch)");
  }
  if (j["stoker_state"] != kStateVersion) {
    throw Error(ErrorCode::state_mismatch,
                fmt::format("loader state: version {} is not the version {} this stoker reads",
                            detail::show_json(j["stoker_state"]), kStateVersion));
  }
  LoaderState s;
  auto get = [&](const char* key, auto& out) {
    if (!j.contains(key)) throw Error(ErrorCode::state_mismatch, fmt::format("loader state: no '{}'", key));
    using T = std::decay_t<decltype(out)>;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const auto v = detail::json_integer<T>(j.at(key));  // never a blind cast of a float
      if (!v)
        throw Error(ErrorCode::state_mismatch, fmt::format("loader state: '{}' is {}, not a whole number in range", key,
                                                           detail::show_json(j.at(key))));
      out = *v;
    } else {
      try {
        j.at(key).get_to(out);
      } catch (const nlohmann::json::exception&) {
        throw Error(ErrorCode::state_mismatch,
                    fmt::format("loader state: '{}' has the wrong type ({})", key, detail::show_json(j.at(key))));
      }
    }
  };
  std::string stored;
  get("epoch", s.epoch);
  get("consumed", s.consumed);
  get("epoch_finished", s.epoch_finished);
  get("seed", s.seed);
  get("order", s.order);
  get("num_samples", s.num_samples);
  get("fields", s.fields);
  if (j.contains("shards")) get("shards", s.shards);           // absent: one file (a state from before shard sets)
  if (j.contains("drawn")) get_drawn(j.at("drawn"), s.drawn);  // absent: no mix
  get("fingerprint", stored);
  if (stored != fingerprint(s)) {
    throw Error(ErrorCode::state_mismatch,
                fmt::format("loader state: the fingerprint {} does not match the contents ({}): the state was edited "
                            "or damaged",
                            stored, fingerprint(s)));
  }
  if (s.consumed > s.num_samples) {
    throw Error(ErrorCode::state_mismatch,
                fmt::format("loader state: consumed {} is more than num_samples {}", s.consumed, s.num_samples));
  }
  return s;
}

}  // namespace stoker
