// The driver API declarations stoker needs, typed by hand: used only where no CUDA toolkit (no
// cuda.h) is installed at build time. Where a toolkit is installed, cuda.h's own declarations are
// used instead (loader/device/cuda_driver.h) and the test suite checks these against it. The types are
// those of the API version stoker pins (cuda_driver.h: kDriverApiVersion), which is what
// cuGetProcAddress returns for the plain names below.
#pragma once

#include <cstddef>
#include <cstdint>

// cuda.h's opaque handle types, declared the same way (global scope) so that handles pass between
// stoker, torch and the user's code unchanged.
struct CUctx_st;
struct CUstream_st;
struct CUevent_st;
struct CUmod_st;
struct CUfunc_st;

namespace stoker::detail::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = ::CUctx_st*;
using CUstream = ::CUstream_st*;
using CUevent = ::CUevent_st*;
using CUmodule = ::CUmod_st*;
using CUfunction = ::CUfunc_st*;
using CUdriverProcAddressQueryResult = int;

inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorNotReady = 600;
inline constexpr unsigned kStreamNonBlocking = 0x1;
inline constexpr unsigned kEventBlockingSync = 0x1;
inline constexpr unsigned kEventDisableTiming = 0x2;
inline constexpr unsigned kMemHostAllocPortable = 0x1;
inline constexpr unsigned kMemHostRegisterPortable = 0x1;
inline constexpr std::uint64_t kGetProcAddressDefault = 0;
inline constexpr CUdriverProcAddressQueryResult kGetProcAddressSuccess = 0;

// One pointer type per entry point, named as cuda.h names the function.
namespace fallback_fn {
using cuGetProcAddress = CUresult (*)(const char*, void**, int, std::uint64_t, CUdriverProcAddressQueryResult*);
using cuInit = CUresult (*)(unsigned);
using cuDriverGetVersion = CUresult (*)(int*);
using cuDeviceGetCount = CUresult (*)(int*);
using cuDeviceGet = CUresult (*)(CUdevice*, int);
using cuDeviceGetName = CUresult (*)(char*, int, CUdevice);
using cuDevicePrimaryCtxRetain = CUresult (*)(CUcontext*, CUdevice);
using cuDevicePrimaryCtxRelease = CUresult (*)(CUdevice);
using cuCtxSetCurrent = CUresult (*)(CUcontext);
using cuCtxGetCurrent = CUresult (*)(CUcontext*);
using cuMemAlloc = CUresult (*)(CUdeviceptr*, std::size_t);
using cuMemFree = CUresult (*)(CUdeviceptr);
using cuMemHostAlloc = CUresult (*)(void**, std::size_t, unsigned);
using cuMemFreeHost = CUresult (*)(void*);
using cuMemHostRegister = CUresult (*)(void*, std::size_t, unsigned);
using cuMemHostUnregister = CUresult (*)(void*);
using cuStreamCreate = CUresult (*)(CUstream*, unsigned);
using cuStreamDestroy = CUresult (*)(CUstream);
using cuStreamSynchronize = CUresult (*)(CUstream);
using cuStreamWaitEvent = CUresult (*)(CUstream, CUevent, unsigned);
using cuEventCreate = CUresult (*)(CUevent*, unsigned);
using cuEventDestroy = CUresult (*)(CUevent);
using cuEventRecord = CUresult (*)(CUevent, CUstream);
using cuEventQuery = CUresult (*)(CUevent);
using cuEventSynchronize = CUresult (*)(CUevent);
using cuEventElapsedTime = CUresult (*)(float*, CUevent, CUevent);
using cuMemcpyHtoDAsync = CUresult (*)(CUdeviceptr, const void*, std::size_t, CUstream);
using cuMemcpyDtoH = CUresult (*)(void*, CUdeviceptr, std::size_t);
using cuModuleLoadData = CUresult (*)(CUmodule*, const void*);
using cuModuleGetFunction = CUresult (*)(CUfunction*, CUmodule, const char*);
using cuLaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**);
using cuGetErrorName = CUresult (*)(CUresult, const char**);
using cuGetErrorString = CUresult (*)(CUresult, const char**);
}  // namespace fallback_fn

}  // namespace stoker::detail::cuda
