// UTF-8 as stoker reads text from files and the file system: one sequence at a time, and whether a
// whole text is UTF-8 (file names are bytes, and need not be).
#pragma once

#include <cstddef>
#include <string_view>

namespace stoker::detail {

// The code point of the UTF-8 sequence at s[0..n) (n > 0) and its length, or 0 when the bytes there
// are not one (a stray continuation byte, a truncated or overlong sequence, a surrogate, past
// U+10FFFF).
std::size_t decode_utf8(const unsigned char* s, std::size_t n, char32_t& cp) noexcept;

// Whether `text` is UTF-8 throughout (NUL and other control characters are UTF-8).
bool is_utf8(std::string_view text) noexcept;

}  // namespace stoker::detail
