// Ranges on Nsight Systems' timeline (NVTX, docs/observability.md): the consumer's waits for data
// as ranges named "stoker.wait", beside the training step's kernels. NVTX v3 is header-only: it is
// compiled in where the CUDA toolkit's nvtx3 headers are found at build time, and does nothing at
// run time until a tool attaches (Nsight Systems sets NVTX_INJECTION64_PATH), a few nanoseconds a
// call. Without the headers both functions do nothing.
#pragma once

#include <cstdint>

namespace stoker::detail {

// Starts a range (process-wide: it may end on another thread); returns its id, 0 where NVTX is
// not compiled in.
std::uint64_t nvtx_range_start(const char* name) noexcept;
void nvtx_range_end(std::uint64_t id) noexcept;

}  // namespace stoker::detail
