#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdint>
#include <mutex>
#include <type_traits>

#include "base/option_spelling.h"
#include "loader/device/cuda_driver.h"
#include "loader/device/device_backend.h"
#include "stoker/error.h"

namespace stoker::detail {
namespace cuda {
namespace {

struct Loaded {
  Driver driver{};
  std::string error;  // why the driver cannot be used; empty when it can
  int devices = 0;
};

Loaded load() {
  Loaded l;
  // RTLD_NOLOAD first: the driver torch already loaded, if any, is the one to use.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) lib = ::dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    const char* why = ::dlerror();
    l.error = fmt::format("no NVIDIA driver: libcuda.so.1 cannot be loaded ({})", why ? why : "not found");
    return l;
  }
  // The one symbol looked up by name; every other entry point comes from it, at the pinned version.
  using GetProcAddress = CUresult (*)(const char*, void**, int, std::uint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProcAddress>(::dlsym(lib, "cuGetProcAddress_v2"));
  if (!get_proc) {
    l.error = "the NVIDIA driver is older than CUDA 12.0 (it has no cuGetProcAddress_v2): update the driver";
    return l;
  }
  Driver& d = l.driver;
  std::string& e = l.error;
  auto resolve = [&](auto& fn, const char* name) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    CUresult rc = get_proc(name, &p, kDriverApiVersion, kGetProcAddressDefault, &status);
    if ((rc != kSuccess || status != kGetProcAddressSuccess || !p) && e.empty()) {
      e = fmt::format("the NVIDIA driver has no {} for CUDA API version {} (query status {})", name, kDriverApiVersion,
                      static_cast<int>(status));
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
#define STOKER_CUDA_RESOLVE(name) resolve(d.name, #name);
  STOKER_CUDA_ENTRY_POINTS(STOKER_CUDA_RESOLVE)
#undef STOKER_CUDA_RESOLVE
  if (!e.empty()) return l;
  CUresult rc = d.cuInit(0);
  if (rc != kSuccess) {
    l.error = fmt::format("the NVIDIA driver failed to initialise: {}", error_text(rc));
    return l;
  }
  rc = d.cuDeviceGetCount(&l.devices);
  if (rc != kSuccess || l.devices == 0) l.error = "the NVIDIA driver reports no CUDA device";
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();  // detected once per process
  return l;
}

}  // namespace

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty())
    throw Error(ErrorCode::device, fmt::format("device cuda: {}; use {} on this machine", l.error,
                                               option_setting("device", "Device::cpu()", "cpu")));
  return l.driver;
}

std::string error_text(CUresult rc) {
  const Loaded& l = loaded();
  const char *name = nullptr, *text = nullptr;
  if (l.driver.cuGetErrorName) l.driver.cuGetErrorName(rc, &name);
  if (l.driver.cuGetErrorString) l.driver.cuGetErrorString(rc, &text);
  return fmt::format("{} ({})", name ? name : fmt::format("CUDA error {}", static_cast<int>(rc)),
                     text ? text : "no description");
}

void check(CUresult rc, const std::string& context) {
  if (rc != kSuccess) throw Error(ErrorCode::device, fmt::format("{}: {}", context, error_text(rc)));
}

namespace {

class CudaBackend final : public DeviceBackend {
 public:
  explicit CudaBackend(const Device& device) : device_(device), d_(driver()) {
    int count = loaded().devices;
    if (device.index < 0 || device.index >= count) {
      throw Error(ErrorCode::device, fmt::format("device {}: this machine has {} CUDA device(s) (cuda:0..cuda:{})",
                                                 device.str(), count, count - 1));
    }
    check(d_.cuDeviceGet(&dev_, device.index), ctx("cuDeviceGet"));
    check(d_.cuDevicePrimaryCtxRetain(&ctx_, dev_), ctx("cuDevicePrimaryCtxRetain"));
  }
  ~CudaBackend() override { d_.cuDevicePrimaryCtxRelease(dev_); }

  const Device& device() const override { return device_; }
  void bind_thread() override { check(d_.cuCtxSetCurrent(ctx_), ctx("cuCtxSetCurrent")); }

  void* alloc_pinned(std::size_t bytes) override {
    Current c(*this);
    void* p = nullptr;
    check(d_.cuMemHostAlloc(&p, bytes, kMemHostAllocPortable),
          ctx(fmt::format("pinning {} bytes of host memory", bytes)));
    return p;
  }
  void free_pinned(void* p) noexcept override {
    Current c(*this);
    d_.cuMemFreeHost(p);
  }
  std::byte* alloc_device(std::size_t bytes) override {
    Current c(*this);
    CUdeviceptr p = 0;
    check(d_.cuMemAlloc(&p, bytes), ctx(fmt::format("allocating {} bytes of device memory", bytes)));
    // A device address: stoker never dereferences it on the host, it only travels to the driver.
    return reinterpret_cast<std::byte*>(p);  // NOLINT(performance-no-int-to-ptr)
  }
  void free_device(std::byte* p) noexcept override {
    Current c(*this);
    d_.cuMemFree(reinterpret_cast<CUdeviceptr>(p));
  }
  bool register_host(void* p, std::size_t bytes) override {
    Current c(*this);
    return d_.cuMemHostRegister(p, bytes, kMemHostRegisterPortable) == kSuccess;
  }
  void unregister_host(void* p) noexcept override {
    Current c(*this);
    d_.cuMemHostUnregister(p);
  }
  StreamHandle create_stream() override {
    Current c(*this);
    CUstream s = nullptr;
    check(d_.cuStreamCreate(&s, kStreamNonBlocking), ctx("cuStreamCreate"));
    return s;
  }
  void destroy_stream(StreamHandle s) noexcept override {
    Current c(*this);
    d_.cuStreamDestroy(static_cast<CUstream>(s));
  }
  EventHandle create_event(bool timing) override {
    Current c(*this);
    CUevent e = nullptr;
    // Blocking sync: a host wait sleeps instead of spinning a core.
    check(d_.cuEventCreate(&e, kEventBlockingSync | (timing ? 0 : kEventDisableTiming)), ctx("cuEventCreate"));
    return e;
  }
  void destroy_event(EventHandle e) noexcept override {
    Current c(*this);
    d_.cuEventDestroy(static_cast<CUevent>(e));
  }
  void copy_to_device_async(std::byte* dst, const void* src, std::size_t bytes, StreamHandle s) override {
    Current c(*this);
    check(d_.cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst), src, bytes, static_cast<CUstream>(s)),
          ctx("cuMemcpyHtoDAsync"));
  }
  void copy_to_host(void* dst, const std::byte* src, std::size_t bytes) override {
    Current c(*this);
    check(d_.cuMemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), bytes), ctx("cuMemcpyDtoH"));
  }
  void record(EventHandle e, StreamHandle s) override {
    Current c(*this);
    check(d_.cuEventRecord(static_cast<CUevent>(e), static_cast<CUstream>(s)), ctx("cuEventRecord"));
  }
  void stream_wait(StreamHandle s, EventHandle e) override {
    Current c(*this);
    check(d_.cuStreamWaitEvent(static_cast<CUstream>(s), static_cast<CUevent>(e), 0), ctx("cuStreamWaitEvent"));
  }
  bool query(EventHandle e) override {
    Current c(*this);
    CUresult rc = d_.cuEventQuery(static_cast<CUevent>(e));
    if (rc == kErrorNotReady) return false;
    check(rc, ctx("cuEventQuery"));
    return true;
  }
  void synchronize(EventHandle e) override {
    Current c(*this);
    check(d_.cuEventSynchronize(static_cast<CUevent>(e)), ctx("cuEventSynchronize"));
  }
  double elapsed_seconds(EventHandle from, EventHandle to) override {
    Current c(*this);
    float ms = 0;
    check(d_.cuEventElapsedTime(&ms, static_cast<CUevent>(from), static_cast<CUevent>(to)), ctx("cuEventElapsedTime"));
    return ms * 1e-3;
  }

 private:
  // Makes this device's primary context current for one call and restores the caller's: batches
  // are released on any thread (autograd's, say), whose current context is not ours.
  class Current {
   public:
    explicit Current(const CudaBackend& b) : d_(b.d_) {
      if (d_.cuCtxGetCurrent(&saved_) == kSuccess && saved_ != b.ctx_) {
        switched_ = d_.cuCtxSetCurrent(b.ctx_) == kSuccess;
      }
    }
    ~Current() {
      if (switched_) d_.cuCtxSetCurrent(saved_);
    }
    Current(const Current&) = delete;
    Current& operator=(const Current&) = delete;

   private:
    const Driver& d_;
    CUcontext saved_ = nullptr;
    bool switched_ = false;
  };

  std::string ctx(const std::string& what) const { return fmt::format("device {}: {}", device_.str(), what); }

  Device device_;
  const Driver& d_;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
};

}  // namespace
}  // namespace cuda

std::unique_ptr<DeviceBackend> make_device_backend(const Device& device) {
  switch (device.kind) {
    case Device::Kind::cuda: return std::make_unique<cuda::CudaBackend>(device);
    case Device::Kind::emulated: return make_emulated_backend();
    case Device::Kind::cpu: break;
  }
  throw Error(ErrorCode::device, "make_device_backend: the CPU device has no backend");
}

}  // namespace stoker::detail
