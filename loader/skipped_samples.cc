#include "loader/skipped_samples.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <utility>

#include "base/option_spelling.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace {

// The worker's notes: a line "POSITION MESSAGE" per field of a sample it skipped.
std::vector<std::pair<std::uint32_t, std::string_view>> parse_notes(std::string_view text) {
  std::vector<std::pair<std::uint32_t, std::string_view>> notes;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    std::uint32_t at = 0;
    const auto [rest, ec] = std::from_chars(line.data(), line.data() + line.size(), at);
    if (ec == std::errc() && rest < line.data() + line.size() && *rest == ' ')
      notes.emplace_back(at, line.substr(static_cast<std::size_t>(rest + 1 - line.data())));
  }
  return notes;
}

}  // namespace

std::vector<std::string> SkippedSamples::take(const Batch& batch, std::string_view notes_text, Stats& stats) {
  std::vector<std::string> warnings;
  const std::span<const std::uint32_t> skipped = batch.skipped();
  if (skipped.empty()) return warnings;
  const std::span<const std::uint64_t> indices = batch.indices();
  const auto notes = parse_notes(notes_text);
  const std::string setting =
      option_setting("on_decode_error", "Options::on_decode_error = OnDecodeError::skip", "skip");
  stats.skipped_samples += skipped.size();
  std::vector<std::uint64_t>& listed = stats.skipped_indices;
  for (const std::uint32_t at : skipped) {
    if (at >= indices.size()) continue;  // a guard: a Batch's positions are within it
    const std::uint64_t index = indices[at];
    if (std::find(listed.begin(), listed.end(), index) != listed.end()) continue;  // warned of already
    if (listed.size() >= kMaxSkippedIndices) {
      if (!warned_limit_) {
        warned_limit_ = true;
        warnings.push_back(
            fmt::format("{}: more than {} samples were skipped ({}): the others are counted in the "
                        "loader's stats (skipped_samples), without a warning each",
                        source_, kMaxSkippedIndices, setting));
      }
      continue;
    }
    listed.push_back(index);
    const std::string where = fmt::format("batch {} of epoch {}, position {}", batch.index(), batch.epoch(), at);
    bool told = false;
    for (const auto& [position, message] : notes) {
      if (position != at) continue;
      warnings.push_back(fmt::format("{}; skipped ({}): the field holds zeros ({})",
                                     printable(message, Printable::message), setting, where));
      told = true;
    }
    if (!told) {
      warnings.push_back(
          fmt::format("{}: sample {}: skipped ({}): a field holds zeros ({}); the decoder's reason was "
                      "cut from the batch's notes (too many of its samples were skipped)",
                      source_, index, setting, where));
    }
  }
  return warnings;
}

}  // namespace stoker::detail
