// The batches a program keeps alive, and what lets them go, in the language of the program that
// keeps them (stoker/options.h's set_option_spelling): live stoker::Batch objects, or Python batches
// whose tensors are alive. The messages of a ring or a device queue that has no free buffer left.
#pragma once

#include <string>

namespace stoker::detail {

std::string kept_batches();
std::string let_batches_go();

}  // namespace stoker::detail
