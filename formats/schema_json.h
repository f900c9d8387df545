// Schema <-> JSON, the form in which an LMDB database stores its schema (docs/lmdb-layout.md).
#pragma once

#include "stoker/export.h"

#include <optional>
#include <string>

#include "stoker/schema.h"

namespace stoker::formats {

// What the "schema" record of an LMDB database holds besides the fields.
struct StoredSchema {
  Schema schema;
  bool complete = false;
  std::optional<std::string> content_digest;  // 16 hex digits, see docs/digest.md
};

inline constexpr int kSchemaFormatVersion = 1;

STOKER_TOOLS_API std::string schema_to_json(const StoredSchema& stored);

// Throws stoker::Error prefixed with `context` when the text is not a valid version-1 schema.
STOKER_TOOLS_API StoredSchema schema_from_json(const std::string& text, const std::string& context);

}  // namespace stoker::formats
