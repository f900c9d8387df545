// Remote sources named by URL: which names are URLs, brace ranges expanded as WebDataset writes them
// ("train-{00000..01023}.h5"), and a URL as messages show it (without the password a URL may hold).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stoker::remote {

// An http:// or https:// URL (what the remote fetch reads).
bool is_remote(std::string_view name) noexcept;

// Every name `pattern` stands for, in order: each "{A..B}" (decimal numbers, as many digits as A
// has when A has leading zeros) and "{x,y,z}" expanded, left to right, the leftmost varying
// slowest. A name without braces is itself. Throws stoker::Error (invalid_option) for a range of
// more than 1,000,000 names, a backwards range or an unclosed brace, naming the pattern.
std::vector<std::string> expand_braces(const std::string& pattern);

// The URL's last path component, without query or fragment ("train-00001.h5").
std::string url_file_name(std::string_view url);
// `text` with each %XX (two hex digits) replaced by its byte; anything else kept as it is.
std::string percent_decoded(std::string_view text);

// `text` as a whole decimal number (digits only, in range), or nullopt: what a brace range, a
// header and a listing give sizes and bounds as.
std::optional<std::uint64_t> decimal(std::string_view text) noexcept;

// The URL with any "user:password@" replaced by "***@", for messages and logs.
std::string shown_url(std::string_view url);

}  // namespace stoker::remote
