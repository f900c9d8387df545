// The part of the CUDA driver API stoker uses, resolved at run time from libcuda.so.1.
//
// Why not link the runtime: stoker must not need a newer driver than the user's LibTorch (CUDA 13's
// runtime needs a 580+ driver), must not load a second CUDA runtime next to torch's, and must build
// and run where no toolkit is installed. The driver library is dlopen'ed, and every entry point is
// resolved through cuGetProcAddress at a pinned API version (kDriverApiVersion), so that each name
// means the ABI stoker was written against whatever the driver's version (no `_v2` names here).
// The declarations are cuda.h's where a toolkit is installed at build time
// (STOKER_HAVE_CUDA_H), else loader/device/cuda_driver_fallback.h's, which the tests check against cuda.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if STOKER_HAVE_CUDA_H
#include <cuda.h>

namespace stoker::detail::cuda {
using ::CUcontext;
using ::CUdevice;
using ::CUdeviceptr;
using ::CUdriverProcAddressQueryResult;
using ::CUevent;
using ::CUfunction;
using ::CUmodule;
using ::CUresult;
using ::CUstream;
inline constexpr CUresult kSuccess = CUDA_SUCCESS;
inline constexpr CUresult kErrorNotReady = CUDA_ERROR_NOT_READY;
inline constexpr unsigned kStreamNonBlocking = CU_STREAM_NON_BLOCKING;
inline constexpr unsigned kEventBlockingSync = CU_EVENT_BLOCKING_SYNC;
inline constexpr unsigned kEventDisableTiming = CU_EVENT_DISABLE_TIMING;
inline constexpr unsigned kMemHostAllocPortable = CU_MEMHOSTALLOC_PORTABLE;
inline constexpr unsigned kMemHostRegisterPortable = CU_MEMHOSTREGISTER_PORTABLE;
inline constexpr std::uint64_t kGetProcAddressDefault = CU_GET_PROC_ADDRESS_DEFAULT;
inline constexpr CUdriverProcAddressQueryResult kGetProcAddressSuccess = CU_GET_PROC_ADDRESS_SUCCESS;
}  // namespace stoker::detail::cuda
// cuda.h maps some names to versioned symbols by macro (cuMemAlloc -> cuMemAlloc_v2): decltype
// sees the versioned function, whose type is the one cuGetProcAddress returns at the pinned version.
#define STOKER_CUDA_FN_TYPE(name) decltype(&::name)
#else
#include "loader/device/cuda_driver_fallback.h"
#define STOKER_CUDA_FN_TYPE(name) ::stoker::detail::cuda::fallback_fn::name
#endif

// Every entry point stoker resolves, by its plain name.
#define STOKER_CUDA_ENTRY_POINTS(X) \
  X(cuInit)                         \
  X(cuDriverGetVersion)             \
  X(cuDeviceGetCount)               \
  X(cuDeviceGet)                    \
  X(cuDeviceGetName)                \
  X(cuDevicePrimaryCtxRetain)       \
  X(cuDevicePrimaryCtxRelease)      \
  X(cuCtxSetCurrent)                \
  X(cuCtxGetCurrent)                \
  X(cuMemAlloc)                     \
  X(cuMemFree)                      \
  X(cuMemHostAlloc)                 \
  X(cuMemFreeHost)                  \
  X(cuMemHostRegister)              \
  X(cuMemHostUnregister)            \
  X(cuStreamCreate)                 \
  X(cuStreamDestroy)                \
  X(cuStreamSynchronize)            \
  X(cuStreamWaitEvent)              \
  X(cuEventCreate)                  \
  X(cuEventDestroy)                 \
  X(cuEventRecord)                  \
  X(cuEventQuery)                   \
  X(cuEventSynchronize)             \
  X(cuEventElapsedTime)             \
  X(cuMemcpyHtoDAsync)              \
  X(cuMemcpyDtoH)                   \
  X(cuModuleLoadData)               \
  X(cuModuleGetFunction)            \
  X(cuLaunchKernel)                 \
  X(cuGetErrorName)                 \
  X(cuGetErrorString)

namespace stoker::detail::cuda {

// The driver API version whose signatures stoker uses: CUDA 12.0 (drivers R525 and later, which
// every CUDA 12 or 13 build of torch needs anyway).
inline constexpr int kDriverApiVersion = 12000;

struct Driver {
// `name` is a declarator here: it cannot be parenthesised.
#define STOKER_CUDA_MEMBER(name) STOKER_CUDA_FN_TYPE(name) name = nullptr;  // NOLINT(bugprone-macro-parentheses)
  STOKER_CUDA_ENTRY_POINTS(STOKER_CUDA_MEMBER)
#undef STOKER_CUDA_MEMBER
};

// The driver, loaded and initialised once per process (cuInit). Throws stoker::Error when there is
// no driver or no device, saying so once per call.
const Driver& driver();

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
std::string error_text(CUresult rc);

// Throws stoker::Error("<context>: <error_text>") unless rc is kSuccess.
void check(CUresult rc, const std::string& context);

}  // namespace stoker::detail::cuda
