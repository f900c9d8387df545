#include "loader/nvtx.h"

#if defined(STOKER_HAVE_NVTX3)
#include <nvtx3/nvToolsExt.h>
#endif

namespace stoker::detail {

#if defined(STOKER_HAVE_NVTX3)
std::uint64_t nvtx_range_start(const char* name) noexcept { return nvtxRangeStartA(name); }
void nvtx_range_end(std::uint64_t id) noexcept { nvtxRangeEnd(id); }
#else
std::uint64_t nvtx_range_start(const char*) noexcept { return 0; }
void nvtx_range_end(std::uint64_t) noexcept {}
#endif

}  // namespace stoker::detail
