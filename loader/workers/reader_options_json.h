// ReaderOptions as JSON, for the texts a loader sends its fork server (loader/workers/worker_setup.h)
// and its probe (loader/workers/probe.h): written once. Internal to loader/workers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "formats/core/reader.h"

namespace stoker::detail {

// Adds path and reader options to `j`.
void put_reader_options(nlohmann::json& j, const std::string& path, const formats::ReaderOptions& o);
// Reads them back (`known` unset). Throws nlohmann::json::exception for a missing key or wrong type.
formats::ReaderOptions get_reader_options(const nlohmann::json& j, std::string& path);

}  // namespace stoker::detail
