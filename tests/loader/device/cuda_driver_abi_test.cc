// Where no toolkit is installed, stoker declares the driver API entry points itself
// (loader/device/cuda_driver_fallback.h), at the API version it pins for cuGetProcAddress. Where one is,
// this checks those declarations against cuda.h: parameter types at compile time, constants and
// result codes at run time. cuda.h's macros map a name to its versioned symbol (cuMemAlloc ->
// cuMemAlloc_v2) on both sides alike.
#include <cuda.h>
#include <gtest/gtest.h>

#include <tuple>
#include <type_traits>

#include "loader/device/cuda_driver_fallback.h"

namespace {

namespace cu = stoker::detail::cuda;

template <class R, class... A>
std::tuple<A...> params_of(R (*)(A...));

// CUresult and CUdriverProcAddressQueryResult are enums in cuda.h and ints (of the same size) in
// the fallback: compare everything else exactly.
template <class T>
using Normalized =
    std::conditional_t<std::is_same_v<T, ::CUresult>, int,
                       std::conditional_t<std::is_same_v<T, ::CUdriverProcAddressQueryResult*>, int*, T>>;
template <class... A>
std::tuple<Normalized<A>...> normalized(std::tuple<A...>);

#define STOKER_SAME_PARAMS(name)                                                                       \
  static_assert(std::is_same_v<decltype(normalized(params_of(std::declval<cu::fallback_fn::name>()))), \
                               decltype(normalized(params_of(&::name)))>,                              \
                "loader/device/cuda_driver_fallback.h: " #name " does not match cuda.h");
STOKER_SAME_PARAMS(cuInit)
STOKER_SAME_PARAMS(cuDriverGetVersion)
STOKER_SAME_PARAMS(cuDeviceGetCount)
STOKER_SAME_PARAMS(cuDeviceGet)
STOKER_SAME_PARAMS(cuDeviceGetName)
STOKER_SAME_PARAMS(cuDevicePrimaryCtxRetain)
STOKER_SAME_PARAMS(cuDevicePrimaryCtxRelease)
STOKER_SAME_PARAMS(cuCtxSetCurrent)
STOKER_SAME_PARAMS(cuCtxGetCurrent)
STOKER_SAME_PARAMS(cuMemAlloc)
STOKER_SAME_PARAMS(cuMemFree)
STOKER_SAME_PARAMS(cuMemHostAlloc)
STOKER_SAME_PARAMS(cuMemFreeHost)
STOKER_SAME_PARAMS(cuMemHostRegister)
STOKER_SAME_PARAMS(cuMemHostUnregister)
STOKER_SAME_PARAMS(cuStreamCreate)
STOKER_SAME_PARAMS(cuStreamDestroy)
STOKER_SAME_PARAMS(cuStreamSynchronize)
STOKER_SAME_PARAMS(cuStreamWaitEvent)
STOKER_SAME_PARAMS(cuEventCreate)
STOKER_SAME_PARAMS(cuEventDestroy)
STOKER_SAME_PARAMS(cuEventRecord)
STOKER_SAME_PARAMS(cuEventQuery)
STOKER_SAME_PARAMS(cuEventSynchronize)
STOKER_SAME_PARAMS(cuEventElapsedTime)
STOKER_SAME_PARAMS(cuMemcpyHtoDAsync)
STOKER_SAME_PARAMS(cuMemcpyDtoH)
STOKER_SAME_PARAMS(cuModuleLoadData)
STOKER_SAME_PARAMS(cuModuleGetFunction)
STOKER_SAME_PARAMS(cuLaunchKernel)
STOKER_SAME_PARAMS(cuGetErrorName)
STOKER_SAME_PARAMS(cuGetErrorString)
STOKER_SAME_PARAMS(cuGetProcAddress)
static_assert(sizeof(cu::CUresult) == sizeof(::CUresult));
static_assert(sizeof(cu::CUdriverProcAddressQueryResult) == sizeof(::CUdriverProcAddressQueryResult));
static_assert(std::is_same_v<cu::CUdeviceptr, ::CUdeviceptr>);
static_assert(std::is_same_v<cu::CUstream, ::CUstream>);

TEST(CudaDriverAbi, ConstantsMatchCudaH) {
  EXPECT_EQ(cu::kSuccess, static_cast<int>(CUDA_SUCCESS));
  EXPECT_EQ(cu::kErrorNotReady, static_cast<int>(CUDA_ERROR_NOT_READY));
  EXPECT_EQ(cu::kStreamNonBlocking, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  EXPECT_EQ(cu::kEventBlockingSync, static_cast<unsigned>(CU_EVENT_BLOCKING_SYNC));
  EXPECT_EQ(cu::kEventDisableTiming, static_cast<unsigned>(CU_EVENT_DISABLE_TIMING));
  EXPECT_EQ(cu::kMemHostAllocPortable, static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE));
  EXPECT_EQ(cu::kMemHostRegisterPortable, static_cast<unsigned>(CU_MEMHOSTREGISTER_PORTABLE));
  EXPECT_EQ(cu::kGetProcAddressDefault, static_cast<std::uint64_t>(CU_GET_PROC_ADDRESS_DEFAULT));
  EXPECT_EQ(cu::kGetProcAddressSuccess, static_cast<int>(CU_GET_PROC_ADDRESS_SUCCESS));
}

}  // namespace
