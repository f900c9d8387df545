// JSON from outside the process (a --resume state, an LMDB database's schema record, a child
// process's answer): parsed within limits, and never printed whole. The parser copes with any
// nesting, but what is done with a value afterwards (printing it, comparing it) recurses: a state
// file nested 100 000 deep would overflow the stack of the process that printed it.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace stoker::detail {

struct JsonLimits {
  std::size_t max_bytes = 16u << 20;
  int max_depth = 32;
};

// Parses `text`, refusing it (nlohmann::json::exception, with a message that says which limit)
// past `limits` before anything deeper is built.
nlohmann::json parse_untrusted_json(std::string_view text, const JsonLimits& limits = {});

// A value for an error message: a number, boolean or null as JSON; a string quoted and cut to
// `max_chars`; an array or object by its kind and size only.
std::string show_json(const nlohmann::json& v, std::size_t max_chars = 64);

}  // namespace stoker::detail
