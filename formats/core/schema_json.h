// Schema <-> JSON, the form in which an LMDB database stores its schema (docs/lmdb-layout.md).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "stoker/schema.h"

namespace stoker::formats {

// What the "schema" record of an LMDB database holds besides the fields.
struct StoredSchema {
  Schema schema;
  bool complete = false;
  std::optional<std::string> content_digest;  // 16 hex digits, see docs/digest.md
  // Per field: the largest sample of a bytes field (written when complete); 0 unknown / fixed.
  std::vector<std::uint64_t> max_bytes;
};

// Version 1: fixed fields only. Version 2 adds bytes fields; a schema without one is written as
// version 1, so that older readers keep reading what they can.
inline constexpr int kSchemaFormatVersion = 2;

std::string schema_to_json(const StoredSchema& stored);

// Throws stoker::Error prefixed with `context` when the text is not a valid version 1 or 2 schema.
StoredSchema schema_from_json(const std::string& text, const std::string& context);

}  // namespace stoker::formats
