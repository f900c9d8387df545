// A C++ transform for the tests of Options::transform, and the host this test program becomes when
// started with kTransformHostFlag (tests/support/main.cc): it rebuilds the transform from its payload.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "stoker/transform.h"

namespace stoker::test {

inline constexpr const char* kTransformHostFlag = "--stoker-test-transform-host";

// {twice: i64, label * 2 * factor (modulo 2^64); ids: i32 ragged, index % 5 values of the index}; with factor 7,
// sample 13 throws ErrorCode::transform "thirteen".
std::shared_ptr<SampleTransform> twice_and_ids(std::int64_t factor);
std::vector<TransformField> twice_and_ids_fields();

// In the host process: never returns.
[[noreturn]] void serve_test_transform_host();

}  // namespace stoker::test
