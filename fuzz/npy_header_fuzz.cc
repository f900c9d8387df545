// .npy headers of values in databases without a schema: a header or an Error, and a parsed header
// never claims more than a sample may hold.
#include <cstddef>
#include <cstdint>
#include <span>

#include "formats/core/npy.h"
#include "stoker/error.h"
#include "stoker/schema.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> value(reinterpret_cast<const std::byte*>(data), size);
  if (!stoker::formats::looks_like_npy(value)) return 0;
  try {
    const auto h = stoker::formats::parse_npy_header(value);
    if (h.header_bytes > size || h.data_bytes > stoker::kMaxSampleBytes) __builtin_trap();
  } catch (const stoker::Error&) {
  }
  return 0;
}
