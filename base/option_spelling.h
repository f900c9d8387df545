// How stoker's messages name an option or a setting, in the language of the program that set it
// (stoker/options.h's set_option_spelling): the C++ API's Options::shm_budget, stoker's tools'
// --shm-budget, the Python package's shm_budget=. Process-wide, set once before any Loader.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "stoker/options.h"

namespace stoker::detail {

OptionSpelling option_spelling() noexcept;

// "Options::shm_budget", "--shm-budget", "shm_budget". Options::mix is the Python package's
// sources=[stoker.Source(...), ...].
std::string option_name(std::string_view option);
// Entry k of a list option: "Options::mix[0]", "--mix number 1" (the tools repeat the flag),
// "sources[0]".
std::string option_entry(std::string_view option, std::size_t k);
// The option set to a value: "Device::cpu()" with "cpp", "--device cpu", "device='cpu'".
// `cpp` is the C++ expression; `text`, the value as the tools and the Python package write it.
std::string option_setting(std::string_view option, std::string_view cpp, std::string_view text);
// The option set to a string: `Options::group = "train"`, "--group train", "group='train'".
std::string option_set_to(std::string_view option, std::string_view value);
// The option set to a list of strings: `Options::fields = {"a", "b"}`, "--fields a,b",
// "fields=['a', 'b']".
std::string option_set_to(std::string_view option, std::span<const std::string> values);

}  // namespace stoker::detail
