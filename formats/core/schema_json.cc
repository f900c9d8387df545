#include "formats/core/schema_json.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/json_numbers.h"
#include "base/untrusted_json.h"
#include "stoker/error.h"

namespace stoker::formats {

using nlohmann::json;

std::string schema_to_json(const StoredSchema& stored) {
  json fields = json::array();
  for (std::size_t i = 0; i < stored.schema.fields.size(); ++i) {
    const Field& f = stored.schema.fields[i];
    if (f.is_bytes()) {
      json jf = {{"name", f.name}, {"kind", "bytes"}};
      if (f.dtype != DType::u8) jf["dtype"] = dtype_name(f.dtype);  // its elements' (absent: bytes)
      if (i < stored.max_bytes.size() && stored.max_bytes[i]) jf["max_bytes"] = stored.max_bytes[i];
      fields.push_back(std::move(jf));
    } else {
      fields.push_back({{"name", f.name}, {"kind", "fixed"}, {"dtype", dtype_name(f.dtype)}, {"shape", f.shape}});
    }
  }
  json j = {{"format", "stoker"},
            {"version", stored.schema.has_bytes_fields() ? 2 : 1},
            {"num_samples", stored.schema.num_samples},
            {"complete", stored.complete},
            {"fields", fields}};
  if (stored.content_digest) j["content_digest"] = *stored.content_digest;
  return j.dump();
}

namespace {

// Field `name`'s "dtype", one stoker knows.
DType field_dtype(const json& jf, const std::string& name, const std::string& context) {
  const auto dtype = jf.at("dtype").get<std::string>();
  const std::optional<DType> parsed = parse_dtype(dtype);
  if (!parsed) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: field '{}' has unknown dtype '{}'", context, printable(name), printable(dtype)));
  }
  return *parsed;
}

}  // namespace

StoredSchema schema_from_json(const std::string& text, const std::string& context) {
  StoredSchema out;
  try {
    json j = detail::parse_untrusted_json(text);
    if (j.value("format", "") != "stoker") {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: schema record is not a stoker schema (no \"format\": \"stoker\")", context));
    }
    // Integers only, in range: a number in a file is never cast blindly.
    auto integer = [&](const json& v, const std::string& what) -> std::int64_t {
      const auto i = detail::json_integer<std::int64_t>(v);
      if (!i)
        throw Error(ErrorCode::dataset, fmt::format("{}: schema record: {} is {}, not a whole number", context, what,
                                                    detail::show_json(v)));
      return *i;
    };
    auto count = [&](const json& v, const std::string& what) -> std::uint64_t {
      const auto u = detail::json_integer<std::uint64_t>(v);
      if (!u)
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: schema record: {} is {}, not a count", context, what, detail::show_json(v)));
      return *u;
    };
    const std::int64_t version = integer(j.at("version"), "version");
    if (version < 1 || version > kSchemaFormatVersion) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: schema version {} is not supported (this stoker reads versions 1 to {}); "
                              "upgrade stoker",
                              context, version, kSchemaFormatVersion));
    }
    out.schema.num_samples = count(j.at("num_samples"), "num_samples");
    out.complete = j.at("complete").get<bool>();
    if (j.contains("content_digest")) out.content_digest = j["content_digest"].get<std::string>();
    for (const auto& jf : j.at("fields")) {
      Field f;
      f.name = jf.at("name").get<std::string>();
      auto kind = jf.at("kind").get<std::string>();
      if (kind == "bytes" && version >= 2) {
        f = Field::bytes_field(std::move(f.name));
        if (jf.contains("dtype")) f.dtype = field_dtype(jf, f.name, context);  // its elements'
        out.max_bytes.resize(out.schema.fields.size() + 1, 0);
        out.max_bytes.back() = jf.contains("max_bytes") ? count(jf["max_bytes"], "max_bytes") : 0;
        out.schema.fields.push_back(std::move(f));
        if (out.schema.fields.size() > kMaxFields) break;
        continue;
      }
      if (kind != "fixed") {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: field '{}' has kind '{}', which this stoker cannot read (upgrade stoker)", context,
                                printable(f.name), printable(kind)));
      }
      f.dtype = field_dtype(jf, f.name, context);
      const json& shape = jf.at("shape");
      if (!shape.is_array())
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: field '{}' has a shape that is not a list", context, printable(f.name)));
      if (shape.size() > 32) {
        throw Error(ErrorCode::dataset, fmt::format("{}: field '{}' has {} dimensions, more than 32", context,
                                                    printable(f.name), shape.size()));
      }
      for (const json& d : shape)
        f.shape.push_back(integer(d, fmt::format("a dimension of field '{}'", printable(f.name))));
      out.schema.fields.push_back(std::move(f));
      if (out.schema.fields.size() > kMaxFields) break;  // validate() says so
    }
  } catch (const json::exception& e) {
    throw Error(ErrorCode::dataset, fmt::format("{}: malformed schema record: {}", context, e.what()));
  }
  out.max_bytes.resize(out.schema.fields.size(), 0);
  out.schema.validate(context);
  return out;
}

}  // namespace stoker::formats
