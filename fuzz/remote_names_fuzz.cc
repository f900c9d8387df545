// What remote names and stores give stoker: a source's brace pattern (a user's text) expanded
// within its bounds, a URL shown and named, and an S3 listing (a store's answer) parsed; an Error or
// a result, never a crash, and memory bounded.
#include <cstddef>
#include <cstdint>
#include <string>

#include "remote/remote_url.h"
#include "remote/s3_store.h"
#include "stoker/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      const auto names = stoker::remote::expand_braces(text);
      if (names.empty()) __builtin_trap();
      for (const auto& n : names) (void)stoker::remote::shown_url(n), (void)stoker::remote::url_file_name(n);
    } else {
      const auto page = stoker::remote::parse_listing(text, stoker::remote::S3Config{}, "bucket");
      for (const auto& o : page.objects)
        if (!o.info) __builtin_trap();
    }
  } catch (const stoker::Error&) {
  }
  return 0;
}
