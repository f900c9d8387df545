// The test suite's main: stoker::init() first, as a training program's, so that the loaders'
// workers start from a clean process image. STOKER_TEST_FORK_ONLY=1 leaves it out, to run the same
// tests on the fork-only path (a ctest entry does). Started with kTransformHostFlag, it is the host
// of the tests' transform (tests/support/test_transform.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "stoker/init.h"
#include "tests/support/test_transform.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], stoker::test::kTransformHostFlag) == 0)
    stoker::test::serve_test_transform_host();
  const char* fork_only = std::getenv("STOKER_TEST_FORK_ONLY");
  if (!fork_only || std::strcmp(fork_only, "1") != 0) stoker::init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
