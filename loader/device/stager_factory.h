// Choosing the Stager (loader/device/stager.h) for Options::staging.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "loader/device/device_buffer_pool.h"
#include "loader/device/stager.h"
#include "stoker/device.h"

namespace stoker::detail {

// The stager for `staging`: registered_shm and automatic page-lock [slots, slots + bytes) and fall
// back to pinned_copy where the platform refuses, registered_shm calling warn() once.
std::unique_ptr<Stager> make_stager(Staging staging, DeviceBufferPool& pool, std::byte* slots, std::size_t bytes,
                                    const std::function<void(const std::string&)>& warn);

}  // namespace stoker::detail
