// Which vector kernels the image code runs: AVX2 and SSSE3 where the CPU has them (asked once, at
// run time), SSE2 otherwise. Every kernel gives the same results; tests run the portable ones too.
#pragma once

namespace stoker::formats {

bool use_avx2();
bool use_ssse3();
// Tests only: the portable kernels from now on (true), or the CPU's again (false). Not synchronised.
void use_portable_kernels(bool portable);

}  // namespace stoker::formats
