// stoker::DeviceStream (stoker/device_stream.h) over the device backend and the spin kernel.
#include "stoker/device_stream.h"

#include <deque>
#include <iostream>
#include <utility>

#include "loader/device/device_backend.h"
#include "loader/device/spin_kernel.h"
#include "stoker/error.h"

namespace stoker {

struct DeviceStream::Impl {
  Device device;
  std::unique_ptr<detail::DeviceBackend> backend;
  detail::StreamHandle stream = nullptr;
  std::unique_ptr<detail::SpinKernel> spin;
  // Marks not yet waited for, oldest first: (number, event). Events are reused once waited for.
  std::deque<std::pair<std::uint64_t, detail::EventHandle>> marks;
  std::deque<detail::EventHandle> spare;
  std::uint64_t next_mark = 1;

  ~Impl() {
    try {
      if (stream) {
        detail::EventHandle done = backend->create_event(false);
        backend->record(done, stream);
        backend->synchronize(done);
        backend->destroy_event(done);
      }
    } catch (const std::exception& e) {
      std::cerr << "stoker: warning: " << e.what() << std::endl;
    }
    for (auto& [n, e] : marks) backend->destroy_event(e);
    for (detail::EventHandle e : spare) backend->destroy_event(e);
    spin.reset();
    if (stream) backend->destroy_stream(stream);
  }
};

DeviceStream::DeviceStream(const Device& device) : impl_(std::make_unique<Impl>()) {
  if (!device.staged()) {
    throw Error(ErrorCode::device, "DeviceStream: the CPU device has no streams; use cuda(i) or emulated()");
  }
  impl_->device = device;
  impl_->backend = detail::make_device_backend(device);
  impl_->backend->bind_thread();
  impl_->stream = impl_->backend->create_stream();
  impl_->spin = std::make_unique<detail::SpinKernel>(device);
}

DeviceStream::~DeviceStream() = default;

const Device& DeviceStream::device() const noexcept { return impl_->device; }

void* DeviceStream::handle() const noexcept { return impl_->stream; }

void DeviceStream::simulate_step(double milliseconds) {
  if (milliseconds > 0) impl_->spin->launch(impl_->stream, milliseconds);
}

std::uint64_t DeviceStream::mark() {
  detail::EventHandle e = nullptr;
  if (impl_->spare.empty()) {
    e = impl_->backend->create_event(false);
  } else {
    e = impl_->spare.front();
    impl_->spare.pop_front();
  }
  impl_->backend->record(e, impl_->stream);
  impl_->marks.emplace_back(impl_->next_mark, e);
  return impl_->next_mark++;
}

void DeviceStream::wait(std::uint64_t n) {
  while (!impl_->marks.empty() && impl_->marks.front().first <= n) {
    auto [number, e] = impl_->marks.front();
    impl_->marks.pop_front();
    try {
      impl_->backend->synchronize(e);
    } catch (...) {
      impl_->backend->destroy_event(e);
      throw;
    }
    impl_->spare.push_back(e);
  }
}

void DeviceStream::synchronize() { wait(mark()); }

}  // namespace stoker
