// The emulated device: host memory as "device memory", a thread per stream as its engine, events
// that complete when their stream reaches them. Lets the staging pipeline run, unchanged, where
// there is no GPU. Handles are interchangeable between emulated backend instances.
#pragma once

#include <functional>

#include "loader/device/device_backend.h"

namespace stoker::detail {

// Runs `op` on stream `s` after everything already queued there (for tests: a "training step").
void emulated_enqueue(StreamHandle s, std::function<void()> op);

}  // namespace stoker::detail
