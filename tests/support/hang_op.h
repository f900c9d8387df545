// A pipeline operation for tests of stuck workers: `hang_once(k)` on an i64 field passes samples
// through, except that the first process to reach its k-th sample (counted from 0 in each process:
// with one worker and sequential order, sample k) hangs there for good (sleeping, as a read hung in
// the kernel would: not stopped, not progressing). Which process that is, is decided
// by creating the file named by $STOKER_TEST_HANG_MARKER (O_EXCL; it then holds the pid), so a
// replacement worker goes on. Without the variable, nothing hangs.
#pragma once

namespace stoker::test {

inline constexpr const char* kHangMarkerEnv = "STOKER_TEST_HANG_MARKER";

}  // namespace stoker::test
