#include "loader/workers/worker_setup.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "formats/core/schema_json.h"
#include "stoker/error.h"

namespace stoker::detail {

using nlohmann::json;

std::string WorkerSetup::to_json() const {
  const json j = {{"path", path},
                  {"format", static_cast<int>(reader_options.format)},
                  {"fields", reader_options.fields},
                  {"group", reader_options.group},
                  {"hdf5_path", static_cast<int>(reader_options.hdf5_path)},
                  {"sequential", reader_options.sequential},
                  {"expected", formats::schema_to_json(formats::StoredSchema{expected, true, std::nullopt, {}})},
                  {"pipeline", pipeline},
                  {"seed", seed},
                  {"num_workers", num_workers},
                  {"batch_size", batch_size},
                  {"sample_bound", sample_bound},
                  {"segment_bytes", segment_bytes}};
  return j.dump();
}

WorkerSetup WorkerSetup::from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    WorkerSetup s;
    s.path = j.at("path").get<std::string>();
    s.reader_options.format = static_cast<Format>(j.at("format").get<int>());
    s.reader_options.fields = j.at("fields").get<std::vector<std::string>>();
    s.reader_options.group = j.at("group").get<std::string>();
    s.reader_options.hdf5_path = static_cast<formats::Hdf5Path>(j.at("hdf5_path").get<int>());
    s.reader_options.sequential = j.at("sequential").get<bool>();
    s.expected = formats::schema_from_json(j.at("expected").get<std::string>(), "worker setup").schema;
    s.pipeline = j.at("pipeline").get<std::string>();
    s.seed = j.at("seed").get<std::uint64_t>();
    s.num_workers = j.at("num_workers").get<std::uint32_t>();
    s.batch_size = j.at("batch_size").get<std::uint64_t>();
    s.sample_bound = j.at("sample_bound").get<std::vector<std::uint64_t>>();
    s.segment_bytes = j.at("segment_bytes").get<std::uint64_t>();
    return s;
  } catch (const json::exception& e) {
    throw Error(ErrorCode::internal, fmt::format("stoker: malformed worker setup: {}", e.what()));
  }
}

}  // namespace stoker::detail
