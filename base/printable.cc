// stoker::printable (stoker/error.h): text from files, escaped where a terminal would act on it.
#include <fmt/format.h>

#include "base/utf8.h"
#include "stoker/error.h"

namespace stoker {
namespace {

// Code points a terminal acts on or that change how the text around them reads: C1 controls, the
// line and paragraph separators, zero-width and bidirectional format characters (the "Trojan
// source" set), the byte order mark, interlinear annotations and tag characters.
bool hidden(char32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) || cp == 0x61c || cp == 0x180e || (cp >= 0x200b && cp <= 0x200f) ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff ||
         (cp >= 0xfff9 && cp <= 0xfffb) || (cp >= 0xe0000 && cp <= 0xe007f);
}

}  // namespace

std::string printable(std::string_view text, Printable what) {
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  for (std::size_t at = 0; at < text.size();) {
    char32_t cp = 0;
    const std::size_t len = detail::decode_utf8(s + at, text.size() - at, cp);
    if (len == 0) {
      out += fmt::format("\\x{:02x}", s[at]);
      at += 1;
      continue;
    }
    if (cp == '\0') {
      out += "\\0";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else if (cp == '\\' && what == Printable::name) {
      out += "\\\\";
    } else if (hidden(cp)) {
      out += cp > 0xffff ? fmt::format("\\U{:08x}", static_cast<std::uint32_t>(cp))
                         : fmt::format("\\u{:04x}", static_cast<std::uint32_t>(cp));
    } else {
      out.append(text.substr(at, len));
    }
    at += len;
  }
  return out;
}

}  // namespace stoker
