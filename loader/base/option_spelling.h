// How stoker's messages name an option or a setting, in the language of the program that set it
// (stoker/options.h's set_option_spelling): the C++ API's Options::shm_budget, stoker's tools'
// --shm-budget, the Python package's shm_budget=. Process-wide, set once before any Loader.
#pragma once

#include <string>
#include <string_view>

#include "stoker/options.h"

namespace stoker::detail {

OptionSpelling option_spelling() noexcept;

// "Options::shm_budget", "--shm-budget", "shm_budget".
std::string option_name(std::string_view option);
// The option set to a value: "Device::cpu()" with "cpp", "--device cpu", "device='cpu'".
// `cpp` is the C++ expression; `text`, the value as the tools and the Python package write it.
std::string option_setting(std::string_view option, std::string_view cpp, std::string_view text);

// The batches a program keeps alive, and what lets them go, as its language has them: live
// stoker::Batch objects, or Python batches whose tensors are alive.
std::string kept_batches();
std::string let_batches_go();

}  // namespace stoker::detail
