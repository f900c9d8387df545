// The checks a Loader makes of its Options before doing anything, each failure a stoker::Error
// that names the option, its value and the allowed range.
#pragma once

#include "stoker/options.h"

namespace stoker::detail {

void check_options(const Options& options);

}  // namespace stoker::detail
