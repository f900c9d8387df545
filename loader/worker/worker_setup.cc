#include "loader/worker/worker_setup.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "formats/core/schema_json.h"
#include "loader/pipeline/op_library.h"
#include "loader/worker/reader_options_json.h"
#include "loader/worker/transform_stage.h"
#include "stoker/error.h"

namespace stoker::detail {

using nlohmann::json;

json text_to_json(const std::string& text) {
  json j = text;
  try {
    (void)j.dump();
    return j;
  } catch (const json::type_error&) {  // not UTF-8: a file name is bytes
    std::string hex;
    hex.reserve(2 * text.size());
    for (const unsigned char c : text) hex += fmt::format("{:02x}", c);
    return json{{"hex", hex}};
  }
}

std::string text_from_json(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  const std::string hex = j.at("hex").get<std::string>();
  if (hex.size() % 2 != 0) throw Error(ErrorCode::internal, "stoker: a text in hex of an odd length");
  std::string text(hex.size() / 2, '\0');
  for (std::size_t k = 0; k < text.size(); ++k) {
    unsigned v = 0;
    const auto [end, ec] = std::from_chars(hex.data() + 2 * k, hex.data() + 2 * k + 2, v, 16);
    if (ec != std::errc() || end != hex.data() + 2 * k + 2)
      throw Error(ErrorCode::internal, "stoker: a text in hex holds other than hex digits");
    text[k] = static_cast<char>(v);
  }
  return text;
}

void put_reader_options(json& j, const std::string& path, const formats::ReaderOptions& o) {
  j["path"] = text_to_json(path);
  j["format"] = static_cast<int>(o.format);
  json fields = json::array();
  for (const std::string& f : o.fields) fields.push_back(text_to_json(f));
  j["fields"] = fields;
  j["group"] = text_to_json(o.group);
  j["hdf5_path"] = static_cast<int>(o.hdf5_path);
  j["sequential"] = o.sequential;
  j["shard_samples"] = o.shard_samples;
  j["shard_identities"] = identities_to_json(o.shard_identities);
  j["max_open_shards"] = o.max_open_shards;
  j["open_shards_lazily"] = o.open_shards_lazily;
  j["lmdb_keys"] = text_to_json(o.lmdb_keys);
  j["lmdb_count_key"] = text_to_json(o.lmdb_count_key);
}

formats::ReaderOptions get_reader_options(const json& j, std::string& path) {
  formats::ReaderOptions o;
  path = text_from_json(j.at("path"));
  o.format = static_cast<Format>(j.at("format").get<int>());
  for (const json& f : j.at("fields")) o.fields.push_back(text_from_json(f));
  o.group = text_from_json(j.at("group"));
  o.hdf5_path = static_cast<formats::Hdf5Path>(j.at("hdf5_path").get<int>());
  o.sequential = j.at("sequential").get<bool>();
  o.shard_samples = j.at("shard_samples").get<std::vector<std::uint64_t>>();
  o.shard_identities = identities_from_json(j.at("shard_identities"));
  o.max_open_shards = j.at("max_open_shards").get<std::size_t>();
  o.open_shards_lazily = j.at("open_shards_lazily").get<bool>();
  o.lmdb_keys = text_from_json(j.at("lmdb_keys"));
  o.lmdb_count_key = text_from_json(j.at("lmdb_count_key"));
  return o;
}

json identities_to_json(const std::vector<std::optional<formats::FileIdentity>>& ids) {
  json out = json::array();
  for (const auto& id : ids) out.push_back(id ? id->to_words() : std::vector<std::uint64_t>{});
  return out;
}

std::vector<std::optional<formats::FileIdentity>> identities_from_json(const json& j) {
  std::vector<std::optional<formats::FileIdentity>> out;
  for (const json& words : j) {
    const auto w = words.get<std::vector<std::uint64_t>>();
    if (!w.empty() && w.size() != 5) {
      throw Error(ErrorCode::internal, fmt::format("stoker: a shard identity of {} words", w.size()));
    }
    out.push_back(formats::FileIdentity::from_words(w));
  }
  return out;
}

Schema delivered_schema(const DatasetSpec& d) {
  load_op_libraries(d.op_libraries);  // before the pipelines name their operations
  if (!d.transform.empty()) return transform_schema(d.transform, d.expected.num_samples);
  return SamplePipelines(d.pipeline, d.expected, d.seed, d.limits).output();
}

namespace {

json texts_to_json(const std::vector<std::string>& texts) {
  json out = json::array();
  for (const std::string& t : texts) out.push_back(text_to_json(t));
  return out;
}

json transform_to_json(const std::vector<TransformField>& fields) {
  json out = json::array();
  for (const TransformField& f : fields) {
    out.push_back({{"name", text_to_json(f.name)},
                   {"dtype", static_cast<int>(f.dtype)},
                   {"shape", f.shape},
                   {"ragged", f.ragged},
                   {"max_sample_bytes", f.max_sample_bytes}});
  }
  return out;
}

std::vector<TransformField> transform_from_json(const json& j) {
  std::vector<TransformField> out;
  for (const json& f : j) {
    const int dtype = f.at("dtype").get<int>();
    if (dtype < 0 || dtype > static_cast<int>(DType::bf16)) {
      throw Error(ErrorCode::internal, fmt::format("stoker: the worker setup's transform has dtype {}", dtype));
    }
    out.push_back(TransformField{text_from_json(f.at("name")), static_cast<DType>(dtype),
                                 f.at("shape").get<std::vector<std::int64_t>>(), f.at("ragged").get<bool>(),
                                 f.at("max_sample_bytes").get<std::uint64_t>()});
  }
  return out;
}

}  // namespace

std::string setup_to_json(const DatasetSpec& d, const RingSetup& ring) {
  json j = {{"expected", formats::schema_to_json(formats::StoredSchema{d.expected, true, std::nullopt, {}})},
            {"pipeline", d.pipeline},
            {"op_libraries", texts_to_json(d.op_libraries)},
            {"seed", d.seed},
            {"max_image_pixels", d.limits.max_image_pixels},
            {"skip_decode_errors", d.on_decode_error == OnDecodeError::skip},
            {"identity", d.identity ? d.identity->to_words() : std::vector<std::uint64_t>{}},
            {"num_workers", ring.num_workers},
            {"batch_size", ring.batch_size},
            {"sample_bound", ring.sample_bound},
            {"segment_bytes", ring.segment_bytes},
            {"stoker_version", ring.stoker_version},
            {"option_spelling", static_cast<int>(ring.option_spelling)},
            {"transform", transform_to_json(d.transform)},
            {"transform_payload", text_to_json(d.transform_payload)},
            {"staging_bound", d.staging_bound}};
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
    for (const json& l : j.at("op_libraries")) d.op_libraries.push_back(text_from_json(l));
    d.seed = j.at("seed").get<std::uint64_t>();
    d.limits.max_image_pixels = j.at("max_image_pixels").get<std::uint64_t>();
    d.on_decode_error = j.at("skip_decode_errors").get<bool>() ? OnDecodeError::skip : OnDecodeError::fail;
    d.identity = DatasetIdentity::from_words(j.at("identity").get<std::vector<std::uint64_t>>());
    d.transform = transform_from_json(j.at("transform"));
    d.transform_payload = text_from_json(j.at("transform_payload"));
    d.staging_bound = j.at("staging_bound").get<std::vector<std::uint64_t>>();
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
