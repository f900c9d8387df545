#include "formats/image/cpu_kernels.h"

namespace stoker::formats {
namespace {

bool portable = false;

#if defined(STOKER_X86_DISPATCH)
bool cpu_has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
bool cpu_has_ssse3() {
  static const bool yes = __builtin_cpu_supports("ssse3");
  return yes;
}
#else
bool cpu_has_avx2() { return false; }
bool cpu_has_ssse3() { return false; }
#endif

}  // namespace

bool use_avx2() { return !portable && cpu_has_avx2(); }
bool use_ssse3() { return !portable && cpu_has_ssse3(); }
void use_portable_kernels(bool yes) { portable = yes; }

}  // namespace stoker::formats
