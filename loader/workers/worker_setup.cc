#include "loader/workers/worker_setup.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "formats/core/schema_json.h"
#include "stoker/error.h"

namespace stoker::detail {

using nlohmann::json;

std::string setup_to_json(const DatasetSpec& d, const RingSetup& ring) {
  const json j = {{"path", d.path},
                  {"format", static_cast<int>(d.reader_options.format)},
                  {"fields", d.reader_options.fields},
                  {"group", d.reader_options.group},
                  {"hdf5_path", static_cast<int>(d.reader_options.hdf5_path)},
                  {"sequential", d.reader_options.sequential},
                  {"expected", formats::schema_to_json(formats::StoredSchema{d.expected, true, std::nullopt, {}})},
                  {"pipeline", d.pipeline},
                  {"seed", d.seed},
                  {"num_workers", ring.num_workers},
                  {"batch_size", ring.batch_size},
                  {"sample_bound", ring.sample_bound},
                  {"segment_bytes", ring.segment_bytes},
                  {"stoker_version", ring.stoker_version},
                  {"option_spelling", static_cast<int>(ring.option_spelling)}};
  return j.dump();
}

WorkerSetup setup_from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    WorkerSetup s;
    DatasetSpec& d = s.dataset;
    d.path = j.at("path").get<std::string>();
    d.reader_options.format = static_cast<Format>(j.at("format").get<int>());
    d.reader_options.fields = j.at("fields").get<std::vector<std::string>>();
    d.reader_options.group = j.at("group").get<std::string>();
    d.reader_options.hdf5_path = static_cast<formats::Hdf5Path>(j.at("hdf5_path").get<int>());
    d.reader_options.sequential = j.at("sequential").get<bool>();
    d.expected = formats::schema_from_json(j.at("expected").get<std::string>(), "worker setup").schema;
    d.pipeline = j.at("pipeline").get<std::string>();
    d.seed = j.at("seed").get<std::uint64_t>();
    s.ring.num_workers = j.at("num_workers").get<std::uint32_t>();
    s.ring.batch_size = j.at("batch_size").get<std::uint64_t>();
    s.ring.sample_bound = j.at("sample_bound").get<std::vector<std::uint64_t>>();
    s.ring.segment_bytes = j.at("segment_bytes").get<std::uint64_t>();
    s.ring.stoker_version = j.at("stoker_version").get<std::string>();
    const int spelling = j.at("option_spelling").get<int>();
    if (spelling < 0 || spelling > static_cast<int>(OptionSpelling::python)) {
      throw Error(ErrorCode::internal,
                  fmt::format("stoker: the worker setup's option spelling {} is unknown", spelling));
    }
    s.ring.option_spelling = static_cast<OptionSpelling>(spelling);
    return s;
  } catch (const json::exception& e) {
    throw Error(ErrorCode::internal, fmt::format("stoker: malformed worker setup: {}", e.what()));
  }
}

}  // namespace stoker::detail
