#include "remote/remote_url.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "stoker/error.h"

namespace stoker::remote {
namespace {

constexpr std::size_t kMaxExpanded = 1'000'000;
constexpr std::size_t kMaxExpandedBytes = std::size_t{128} << 20;
constexpr std::size_t kNameOverhead = 64;  // a std::string's own bytes and its allocation's, about

[[noreturn]] void bad_pattern(const std::string& pattern, std::string_view why) {
  throw Error(ErrorCode::invalid_option, fmt::format("source '{}': {}", shown_url(pattern), why));
}

// The alternatives one brace group stands for: "00000..00003" or "a,b,c".
std::vector<std::string> alternatives(const std::string& pattern, std::string_view group) {
  std::vector<std::string> out;
  if (const std::size_t dots = group.find(".."); dots != std::string_view::npos) {
    const std::string_view first = group.substr(0, dots), last = group.substr(dots + 2);
    const std::optional<std::uint64_t> from = decimal(first), to = decimal(last);
    if (!from || !to)
      bad_pattern(pattern, fmt::format("'{{{}}}' is not a range of whole numbers ({{0..9}}, {{00000..01023}})", group));
    const std::uint64_t a = *from, b = *to;
    if (b < a) bad_pattern(pattern, fmt::format("the range '{{{}}}' runs backwards", group));
    if (b - a >= kMaxExpanded)
      bad_pattern(pattern, fmt::format("the range '{{{}}}' names more than {} shards", group, kMaxExpanded));
    const std::size_t width = first.size() > 1 && first[0] == '0' ? first.size() : 0;
    for (std::uint64_t v = a;; ++v) {  // not v <= b: b may be the largest value
      out.push_back(fmt::format("{:0{}}", v, width));
      if (v == b) break;
    }
    return out;
  }
  for (std::size_t at = 0;;) {
    const std::size_t comma = group.find(',', at);
    out.emplace_back(group.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at));
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

std::optional<std::uint64_t> decimal(std::string_view text) noexcept {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

bool is_remote(std::string_view name) noexcept { return name.starts_with("http://") || name.starts_with("https://"); }

std::vector<std::string> expand_braces(const std::string& pattern) {
  std::vector<std::string> names{""};
  for (std::size_t at = 0; at < pattern.size();) {
    const std::size_t open = pattern.find('{', at);
    const std::string literal = pattern.substr(at, open == std::string::npos ? std::string::npos : open - at);
    for (std::string& n : names) n += literal;
    if (open == std::string::npos) break;
    const std::size_t close = pattern.find('}', open);
    if (close == std::string::npos) bad_pattern(pattern, fmt::format("the brace at byte {} is not closed", open));
    const std::vector<std::string> alts =
        alternatives(pattern, std::string_view(pattern).substr(open + 1, close - open - 1));
    if (names.size() * alts.size() > kMaxExpanded)
      bad_pattern(pattern, fmt::format("it names more than {} shards", kMaxExpanded));
    // Bounded memory whatever the text: the names' bytes, not only their count.
    std::size_t longest = 0;
    for (const std::string& a : alts) longest = std::max(longest, a.size());
    if (names.size() * alts.size() * (names.front().size() + longest + pattern.size() + kNameOverhead) >
        kMaxExpandedBytes)
      bad_pattern(pattern, fmt::format("its names would take more than {} MiB", kMaxExpandedBytes >> 20));
    std::vector<std::string> next;
    next.reserve(names.size() * alts.size());
    for (const std::string& n : names)
      for (const std::string& a : alts) next.push_back(n + a);
    names = std::move(next);
    at = close + 1;
  }
  return names;
}

std::string url_file_name(std::string_view url) {
  url = url.substr(0, url.find_first_of("?#"));
  while (url.size() > 1 && url.back() == '/') url.remove_suffix(1);
  const std::size_t slash = url.find_last_of('/');
  return std::string(slash == std::string_view::npos ? url : url.substr(slash + 1));
}

std::string percent_decoded(std::string_view text) {
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string shown_url(std::string_view url) {
  const std::size_t scheme = url.find("://");
  if (scheme == std::string_view::npos) return std::string(url);
  const std::size_t host = scheme + 3, end = url.find_first_of("/?#", host);
  const std::size_t at = url.substr(0, end).find('@', host);
  if (at == std::string_view::npos) return std::string(url);
  return fmt::format("{}***{}", url.substr(0, host), url.substr(at));
}

}  // namespace stoker::remote
