#include "base/utf8.h"

namespace stoker::detail {

std::size_t decode_utf8(const unsigned char* s, std::size_t n, char32_t& cp) noexcept {
  const unsigned char b = s[0];
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  std::size_t len = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the bounds of the second byte
  if (b >= 0xc2 && b <= 0xdf) {
    len = 2;
  } else if (b >= 0xe0 && b <= 0xef) {
    len = 3;
    if (b == 0xe0) lo = 0xa0;  // overlong
    if (b == 0xed) hi = 0x9f;  // surrogates
  } else if (b >= 0xf0 && b <= 0xf4) {
    len = 4;
    if (b == 0xf0) lo = 0x90;  // overlong
    if (b == 0xf4) hi = 0x8f;  // past U+10FFFF
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  cp = b & (0xff >> (len + 1));
  for (std::size_t k = 1; k < len; ++k) {
    if ((s[k] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[k] & 0x3f);
  }
  return len;
}

bool is_utf8(std::string_view text) noexcept {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  char32_t cp = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t len = decode_utf8(s + at, text.size() - at, cp);
    if (len == 0) return false;
    at += len;
  }
  return true;
}

}  // namespace stoker::detail
