// Which vector kernels the image code runs: AVX2 and SSSE3 where the CPU has them (asked once, at
// run time), SSE2 otherwise. Every kernel gives the same results; tests run the portable ones too.
#pragma once

// The vector intrinsics, and STOKER_X86_DISPATCH where kernels for SSSE3 and AVX2 can be compiled
// (with a target attribute each) beside the baseline SSE2 ones, to be chosen at run time.
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define STOKER_X86_DISPATCH 1
#endif

namespace stoker::formats {

bool use_avx2();
bool use_ssse3();
// Tests only: the portable kernels from now on (true), or the CPU's again (false). Not synchronised.
void use_portable_kernels(bool portable);

}  // namespace stoker::formats
