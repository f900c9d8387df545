#include "loader/nvtx.h"

#if defined(STOKER_HAVE_NVTX3)
#include <nvtx3/nvToolsExt.h>
#endif

namespace stoker::detail {

#if defined(STOKER_HAVE_NVTX3)
namespace {

// NVTX writes its function pointers at its first call (a tool's, or none) and reads them without
// synchronisation after. The first call is made here, once, in a static's initialisation: every
// later call, from any thread, happens after it (ThreadSanitizer agrees).
void initialised() noexcept {
  static const bool once = (nvtxInitialize(nullptr), true);
  (void)once;
}

}  // namespace

std::uint64_t nvtx_range_start(const char* name) noexcept {
  initialised();
  return nvtxRangeStartA(name);
}

void nvtx_range_end(std::uint64_t id) noexcept {
  initialised();
  nvtxRangeEnd(id);
}
#else
std::uint64_t nvtx_range_start(const char*) noexcept { return 0; }
void nvtx_range_end(std::uint64_t) noexcept {}
#endif

}  // namespace stoker::detail
