// The part of the CUDA driver API stoker uses, resolved at run time from libcuda.so.1.
//
// Why not link the runtime: stoker must not need a newer driver than the user's LibTorch (CUDA 13's
// runtime needs a 580+ driver), must not load a second CUDA runtime next to torch's, and must build
// and run where no toolkit is installed. The driver API's entry points below are a stable C ABI
// (the `_v2` names are those cuda.h maps the plain names to); when a toolkit is present the test
// suite checks these declarations against cuda.h.
#pragma once

#include <cstddef>
#include <string>

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

inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorNotReady = 600;
inline constexpr unsigned kStreamNonBlocking = 0x1;
inline constexpr unsigned kEventBlockingSync = 0x1;
inline constexpr unsigned kEventDisableTiming = 0x2;
inline constexpr unsigned kMemHostAllocPortable = 0x1;
inline constexpr unsigned kMemHostRegisterPortable = 0x1;

struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxGetCurrent)(CUcontext*);
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemHostAlloc)(void**, std::size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuMemHostRegister)(void*, std::size_t, unsigned);
  CUresult (*cuMemHostUnregister)(void*);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, std::size_t, CUstream);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, std::size_t);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
};

// The driver, loaded and initialised once per process (cuInit). Throws stoker::Error when there is
// no driver or no device, saying so once per call.
const Driver& driver();

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"
std::string error_text(CUresult rc);

// Throws stoker::Error("<context>: <error_text>") unless rc is kSuccess.
void check(CUresult rc, const std::string& context);

}  // namespace stoker::detail::cuda
