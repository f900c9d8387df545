// A pipeline operation for tests of memory pressure: `hog_once(k, mib)` on an i64 field passes
// samples through, except that the first process to reach its k-th sample (counted from 0 in each
// process) first takes `mib` MiB of memory, touches every page, and holds it while it sleeps (a
// worker decoding an outlier, in a machine or container short of memory). Which process that is,
// is decided by creating the file named by $STOKER_TEST_HOG_MARKER (O_EXCL), so a replacement
// worker goes on. Without the variable, nothing is taken.
#pragma once

namespace stoker::test {

inline constexpr const char* kHogMarkerEnv = "STOKER_TEST_HOG_MARKER";

}  // namespace stoker::test
