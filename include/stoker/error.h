// stoker/error.h: the one exception type stoker throws.
//
// Every message reads "context: detail": it names the file, field, sample index or LMDB key,
// worker and pid involved, and, where there is one, what the user can do about it. Thread-safe
// like any std::exception.
#pragma once

#include <stdexcept>
#include <string>

#include "stoker/export.h"

namespace stoker {

class STOKER_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace stoker
