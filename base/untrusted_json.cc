#include "base/untrusted_json.h"

#include <fmt/format.h>

namespace stoker::detail {
namespace {

// nlohmann::json::exception has only a protected constructor: a subclass of our own carries ours.
struct LimitError : nlohmann::json::exception {
  explicit LimitError(const std::string& what) : exception(599, what.c_str()) {}
};

}  // namespace

nlohmann::json parse_untrusted_json(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes) {
    throw LimitError(fmt::format("{} bytes of JSON, more than the {} allowed", text.size(), limits.max_bytes));
  }
  const nlohmann::json::parser_callback_t within = [&](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > limits.max_depth) {
      throw LimitError(fmt::format("JSON nested more than {} levels deep", limits.max_depth));
    }
    return true;
  };
  return nlohmann::json::parse(text, within);
}

std::string show_json(const nlohmann::json& v, std::size_t max_chars) {
  if (v.is_object()) return fmt::format("an object of {} keys", v.size());
  if (v.is_array()) return fmt::format("an array of {} elements", v.size());
  std::string text = v.dump();
  if (text.size() > max_chars) text = text.substr(0, max_chars) + "...";
  return text;
}

}  // namespace stoker::detail
