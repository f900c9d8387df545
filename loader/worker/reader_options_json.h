// ReaderOptions as JSON, for the texts a loader sends its fork server (loader/worker/worker_setup.h)
// and its probe (loader/child_reads/probe.h): written once. Internal to the loader.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/core/reader.h"

namespace stoker::detail {

// A text as JSON: a string when it is UTF-8, else {"hex": its bytes} (a path on Linux is bytes, and
// JSON holds only UTF-8); and back. text_from_json throws nlohmann::json::exception for another
// value, stoker::Error (internal) for hex that is not.
nlohmann::json text_to_json(const std::string& text);
std::string text_from_json(const nlohmann::json& j);

// Adds path and reader options to `j` (texts as text_to_json writes them).
void put_reader_options(nlohmann::json& j, const std::string& path, const formats::ReaderOptions& o);
// Reads them back (`known` unset). Throws nlohmann::json::exception for a missing key or wrong type.
formats::ReaderOptions get_reader_options(const nlohmann::json& j, std::string& path);

// A shard set's identities (ReaderOptions::shard_identities): one list of words each, empty for
// one not recorded. Reading throws nlohmann::json::exception, or stoker::Error (internal) for a
// list of other than five words.
nlohmann::json identities_to_json(const std::vector<std::optional<formats::FileIdentity>>& ids);
std::vector<std::optional<formats::FileIdentity>> identities_from_json(const nlohmann::json& j);

}  // namespace stoker::detail
