#include "loader/workers/worker_setup.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "formats/core/schema_json.h"
#include "loader/workers/reader_options_json.h"
#include "stoker/error.h"

namespace stoker::detail {

using nlohmann::json;

void put_reader_options(json& j, const std::string& path, const formats::ReaderOptions& o) {
  j["path"] = path;
  j["format"] = static_cast<int>(o.format);
  j["fields"] = o.fields;
  j["group"] = o.group;
  j["hdf5_path"] = static_cast<int>(o.hdf5_path);
  j["sequential"] = o.sequential;
  j["shard_samples"] = o.shard_samples;
  j["max_open_shards"] = o.max_open_shards;
  j["lmdb_keys"] = o.lmdb_keys;
  j["lmdb_count_key"] = o.lmdb_count_key;
}

formats::ReaderOptions get_reader_options(const json& j, std::string& path) {
  formats::ReaderOptions o;
  path = j.at("path").get<std::string>();
  o.format = static_cast<Format>(j.at("format").get<int>());
  o.fields = j.at("fields").get<std::vector<std::string>>();
  o.group = j.at("group").get<std::string>();
  o.hdf5_path = static_cast<formats::Hdf5Path>(j.at("hdf5_path").get<int>());
  o.sequential = j.at("sequential").get<bool>();
  o.shard_samples = j.at("shard_samples").get<std::vector<std::uint64_t>>();
  o.max_open_shards = j.at("max_open_shards").get<std::size_t>();
  o.lmdb_keys = j.at("lmdb_keys").get<std::string>();
  o.lmdb_count_key = j.at("lmdb_count_key").get<std::string>();
  return o;
}

std::string setup_to_json(const DatasetSpec& d, const RingSetup& ring) {
  json j = {{"expected", formats::schema_to_json(formats::StoredSchema{d.expected, true, std::nullopt, {}})},
            {"pipeline", d.pipeline},
            {"seed", d.seed},
            {"max_image_pixels", d.limits.max_image_pixels},
            {"identity", d.identity ? d.identity->to_words() : std::vector<std::uint64_t>{}},
            {"num_workers", ring.num_workers},
            {"batch_size", ring.batch_size},
            {"sample_bound", ring.sample_bound},
            {"segment_bytes", ring.segment_bytes},
            {"stoker_version", ring.stoker_version},
            {"option_spelling", static_cast<int>(ring.option_spelling)}};
  put_reader_options(j, d.path, d.reader_options);
  return j.dump();
}

WorkerSetup setup_from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    WorkerSetup s;
    DatasetSpec& d = s.dataset;
    d.reader_options = get_reader_options(j, d.path);
    d.expected = formats::schema_from_json(j.at("expected").get<std::string>(), "worker setup").schema;
    d.pipeline = j.at("pipeline").get<std::string>();
    d.seed = j.at("seed").get<std::uint64_t>();
    d.limits.max_image_pixels = j.at("max_image_pixels").get<std::uint64_t>();
    d.identity = DatasetIdentity::from_words(j.at("identity").get<std::vector<std::uint64_t>>());
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
