#include "loader/device/spin_kernel.h"

#include <chrono>
#include <cstdint>
#include <thread>

#include "loader/device/cuda_driver.h"
#include "loader/device/emulated_device.h"

namespace stoker::detail {
namespace {

// spin(ns): one thread reads the global nanosecond timer until `ns` have passed.
constexpr const char* kSpinPtx = R"(
.version 6.0
.target sm_50
.address_size 64
.visible .entry spin(.param .u64 ns)
{
  .reg .u64 %t0, %t1, %d, %n;
  .reg .pred %p;
  ld.param.u64 %n, [ns];
  mov.u64 %t0, %globaltimer;
LOOP:
  mov.u64 %t1, %globaltimer;
  sub.u64 %d, %t1, %t0;
  setp.lt.u64 %p, %d, %n;
  @%p bra LOOP;
  ret;
}
)";

}  // namespace

SpinKernel::SpinKernel(const Device& device) : device_(device) {
  if (device.kind != Device::Kind::cuda) return;
  namespace cu = cuda;
  const cu::Driver& d = cu::driver();
  cu::CUmodule module = nullptr;
  cu::check(d.cuModuleLoadData(&module, kSpinPtx), "loading the spin kernel");
  cu::CUfunction fn = nullptr;
  cu::check(d.cuModuleGetFunction(&fn, module, "spin"), "finding the spin kernel");
  module_ = module;
  function_ = fn;
}

void SpinKernel::launch(StreamHandle stream, double ms) {
  if (device_.kind == Device::Kind::cuda) {
    namespace cu = cuda;
    std::uint64_t ns = static_cast<std::uint64_t>(ms * 1e6);
    void* params[] = {&ns};
    cu::check(cu::driver().cuLaunchKernel(static_cast<cu::CUfunction>(function_), 1, 1, 1, 1, 1, 1, 0,
                                          static_cast<cu::CUstream>(stream), params, nullptr),
              "launching the spin kernel");
  } else {
    emulated_enqueue(stream, [ms] { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); });
  }
}

}  // namespace stoker::detail
