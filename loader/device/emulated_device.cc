#include "loader/device/emulated_device.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "stoker/error.h"

namespace stoker::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Operations run in order on one thread, like a CUDA stream.
class EmulatedStream {
 public:
  EmulatedStream() : thread_([this] { run(); }) {}
  ~EmulatedStream() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void enqueue(std::function<void()> op) {
    {
      std::lock_guard lock(mu_);
      ops_.push_back(std::move(op));
    }
    cv_.notify_all();
  }

 private:
  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !ops_.empty(); });
      if (ops_.empty()) return;  // stop_, and everything queued has run
      auto op = std::move(ops_.front());
      ops_.pop_front();
      lock.unlock();
      op();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  bool stop_ = false;
  std::thread thread_;
};

// Completes up to the last record() once its stream reaches it.
struct EmulatedEvent {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0;
  std::uint64_t completed = 0;
  Clock::time_point at;

  void complete(std::uint64_t target) {
    {
      std::lock_guard lock(mu);
      completed = std::max(completed, target);
      at = Clock::now();
    }
    cv.notify_all();
  }
  void wait_for(std::uint64_t target) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return completed >= target; });
  }
};

// An event handle owns a reference: operations queued on streams hold their own, so destroying
// the handle while they are pending is safe, as cuEventDestroy is.
struct EventRef {
  std::shared_ptr<EmulatedEvent> event = std::make_shared<EmulatedEvent>();
};

EmulatedStream* stream_of(StreamHandle s) { return static_cast<EmulatedStream*>(s); }
std::shared_ptr<EmulatedEvent> event_of(EventHandle e) { return static_cast<EventRef*>(e)->event; }

// A null stream runs operations at once, in the calling thread.
void run_on(StreamHandle s, std::function<void()> op) {
  if (s) {
    stream_of(s)->enqueue(std::move(op));
  } else {
    op();
  }
}

class EmulatedBackend final : public DeviceBackend {
 public:
  const Device& device() const override { return device_; }
  void bind_thread() override {}
  void* alloc_pinned(std::size_t bytes) override { return checked(std::malloc(bytes)); }
  void free_pinned(void* p) noexcept override { std::free(p); }
  std::byte* alloc_device(std::size_t bytes) override { return static_cast<std::byte*>(checked(std::malloc(bytes))); }
  void free_device(std::byte* p) noexcept override { std::free(p); }
  bool register_host(void*, std::size_t) override { return true; }
  void unregister_host(void*) noexcept override {}
  StreamHandle create_stream() override { return new EmulatedStream; }
  void destroy_stream(StreamHandle s) noexcept override { delete stream_of(s); }
  EventHandle create_event(bool) override { return new EventRef; }
  void destroy_event(EventHandle e) noexcept override { delete static_cast<EventRef*>(e); }
  void copy_to_device_async(std::byte* dst, const void* src, std::size_t bytes, StreamHandle s) override {
    run_on(s, [=] { std::memcpy(dst, src, bytes); });
  }
  void copy_to_host(void* dst, const std::byte* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void record(EventHandle e, StreamHandle s) override {
    std::shared_ptr<EmulatedEvent> ev = event_of(e);
    std::uint64_t target;
    {
      std::lock_guard lock(ev->mu);
      target = ++ev->recorded;
    }
    run_on(s, [ev, target] { ev->complete(target); });
  }
  void stream_wait(StreamHandle s, EventHandle e) override {
    std::shared_ptr<EmulatedEvent> ev = event_of(e);
    std::uint64_t target;
    {
      std::lock_guard lock(ev->mu);
      target = ev->recorded;
    }
    run_on(s, [ev, target] { ev->wait_for(target); });
  }
  bool query(EventHandle e) override {
    std::shared_ptr<EmulatedEvent> ev = event_of(e);
    std::lock_guard lock(ev->mu);
    return ev->completed >= ev->recorded;
  }
  void synchronize(EventHandle e) override {
    std::shared_ptr<EmulatedEvent> ev = event_of(e);
    std::uint64_t target;
    {
      std::lock_guard lock(ev->mu);
      target = ev->recorded;
    }
    ev->wait_for(target);
  }
  double elapsed_seconds(EventHandle from, EventHandle to) override {
    return std::chrono::duration<double>(event_of(to)->at - event_of(from)->at).count();
  }

 private:
  static void* checked(void* p) {
    if (!p) throw std::bad_alloc();
    return p;
  }
  Device device_ = Device::emulated();
};

}  // namespace

void emulated_enqueue(StreamHandle s, std::function<void()> op) { run_on(s, std::move(op)); }

std::unique_ptr<DeviceBackend> make_emulated_backend() { return std::make_unique<EmulatedBackend>(); }

}  // namespace stoker::detail
