// stoker declares the driver API entry points it loads at run time itself (loader/cuda_driver.h),
// so that it builds without a toolkit. Where a toolkit is present, this checks them against cuda.h:
// parameter types at compile time, constants and result codes at run time.
#include <cuda.h>
#include <gtest/gtest.h>

#include <tuple>
#include <type_traits>

#include "loader/cuda_driver.h"

namespace {

namespace cu = stoker::detail::cuda;

template <class R, class... A>
std::tuple<A...> params_of(R (*)(A...));

#define STOKER_SAME_PARAMS(field, symbol)                                                                  \
  static_assert(std::is_same_v<decltype(params_of(std::declval<decltype(cu::Driver::field)>())),         \
                               decltype(params_of(&::symbol))>,                                           \
                "loader/cuda_driver.h: " #field " does not match cuda.h's " #symbol)

STOKER_SAME_PARAMS(cuInit, cuInit);
STOKER_SAME_PARAMS(cuDeviceGet, cuDeviceGet);
STOKER_SAME_PARAMS(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
STOKER_SAME_PARAMS(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);
STOKER_SAME_PARAMS(cuCtxSetCurrent, cuCtxSetCurrent);
STOKER_SAME_PARAMS(cuMemAlloc, cuMemAlloc_v2);
STOKER_SAME_PARAMS(cuMemFree, cuMemFree_v2);
STOKER_SAME_PARAMS(cuMemHostAlloc, cuMemHostAlloc);
STOKER_SAME_PARAMS(cuMemHostRegister, cuMemHostRegister_v2);
STOKER_SAME_PARAMS(cuStreamCreate, cuStreamCreate);
STOKER_SAME_PARAMS(cuStreamDestroy, cuStreamDestroy_v2);
STOKER_SAME_PARAMS(cuStreamWaitEvent, cuStreamWaitEvent);
STOKER_SAME_PARAMS(cuEventCreate, cuEventCreate);
STOKER_SAME_PARAMS(cuEventDestroy, cuEventDestroy_v2);
STOKER_SAME_PARAMS(cuEventRecord, cuEventRecord);
STOKER_SAME_PARAMS(cuEventElapsedTime, cuEventElapsedTime);
STOKER_SAME_PARAMS(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
STOKER_SAME_PARAMS(cuMemcpyDtoH, cuMemcpyDtoH_v2);
STOKER_SAME_PARAMS(cuModuleLoadData, cuModuleLoadData);
STOKER_SAME_PARAMS(cuLaunchKernel, cuLaunchKernel);
static_assert(sizeof(cu::CUresult) == sizeof(CUresult));

TEST(CudaDriverAbi, ConstantsMatchCudaH) {
  EXPECT_EQ(cu::kSuccess, static_cast<int>(CUDA_SUCCESS));
  EXPECT_EQ(cu::kErrorNotReady, static_cast<int>(CUDA_ERROR_NOT_READY));
  EXPECT_EQ(cu::kStreamNonBlocking, static_cast<unsigned>(CU_STREAM_NON_BLOCKING));
  EXPECT_EQ(cu::kEventBlockingSync, static_cast<unsigned>(CU_EVENT_BLOCKING_SYNC));
  EXPECT_EQ(cu::kEventDisableTiming, static_cast<unsigned>(CU_EVENT_DISABLE_TIMING));
  EXPECT_EQ(cu::kMemHostAllocPortable, static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE));
  EXPECT_EQ(cu::kMemHostRegisterPortable, static_cast<unsigned>(CU_MEMHOSTREGISTER_PORTABLE));
}

}  // namespace
