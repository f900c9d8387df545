#include "stoker/version.h"

namespace stoker {

std::string_view version() noexcept { return STOKER_VERSION_STRING; }

}  // namespace stoker
