// loader/device: stoker::DeviceStream, the public stream for programs without a framework, on the
// emulated device: its marks order host waits after the work queued before them.
#include "stoker/device_stream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "stoker/error.h"

namespace stoker {
namespace {

using Clock = std::chrono::steady_clock;

TEST(DeviceStream, AWaitReturnsOnceTheWorkBeforeItsMarkIsDone) {
  DeviceStream stream(Device::emulated());
  EXPECT_EQ(stream.device(), Device::emulated());
  EXPECT_NE(stream.handle(), nullptr);
  const std::uint64_t first = stream.mark();
  EXPECT_EQ(first, 1u);
  // 30 ms of "device work", then a mark: waiting for it takes at least the work's time (the
  // emulated stream sleeps; a wait that returned early would see less).
  const auto t0 = Clock::now();
  stream.simulate_step(30);
  const std::uint64_t after = stream.mark();
  EXPECT_EQ(after, 2u);
  stream.wait(after);
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(30));
  stream.wait(first);  // already waited for: at once
  stream.wait(0);
  stream.synchronize();
}

TEST(DeviceStream, TheCpuDeviceHasNoStream) {
  try {
    DeviceStream stream(Device::cpu());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::device);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("the CPU device has no streams"));
  }
}

}  // namespace
}  // namespace stoker
