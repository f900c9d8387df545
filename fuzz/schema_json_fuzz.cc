// The schema record of an LMDB database (docs/lmdb-layout.md): any text is a schema or an Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/core/schema_json.h"
#include "stoker/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto stored =
        stoker::formats::schema_from_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    // What was accepted must be a schema stoker can size: validate() ran; the JSON round-trips.
    const auto again = stoker::formats::schema_from_json(stoker::formats::schema_to_json(stored), "fuzz");
    if (!(again.schema == stored.schema)) __builtin_trap();
  } catch (const stoker::Error&) {
  }
  return 0;
}
