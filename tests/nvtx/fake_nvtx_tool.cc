// A stand-in for Nsight Systems' NVTX library: loaded by NVTX v3 from NVTX_INJECTION64_PATH, it takes
// the range start and end callbacks and counts what it is given, for tests/nvtx/nvtx_check.cc to
// read (fake_nvtx_*).
#include <nvtx3/nvToolsExt.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

namespace {

std::mutex mu;
std::set<std::uint64_t> open_ranges;
std::uint64_t next_id = 1, started = 0, ended = 0, unknown_ends = 0, other_names = 0;

nvtxRangeId_t range_start_a(const char* message) {
  std::lock_guard lock(mu);
  ++started;
  if (std::strcmp(message, "stoker.wait") != 0) ++other_names;
  open_ranges.insert(next_id);
  return next_id++;
}

void range_end(nvtxRangeId_t id) {
  std::lock_guard lock(mu);
  ++ended;
  if (open_ranges.erase(id) == 0) ++unknown_ends;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (callbacks == nullptr || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
      size <= NVTX_CBID_CORE_RangeEnd) {
    return 0;
  }
  *table[NVTX_CBID_CORE_RangeStartA] = reinterpret_cast<NvtxFunctionPointer>(&range_start_a);
  *table[NVTX_CBID_CORE_RangeEnd] = reinterpret_cast<NvtxFunctionPointer>(&range_end);
  return 1;
}

// started, ended, still open, ends of ranges never started, ranges of another name.
__attribute__((visibility("default"))) void fake_nvtx_counts(std::uint64_t* out) {
  std::lock_guard lock(mu);
  out[0] = started;
  out[1] = ended;
  out[2] = open_ranges.size();
  out[3] = unknown_ends;
  out[4] = other_names;
}
}
