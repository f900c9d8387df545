#include "formats/hdf5/hdf5_errors.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

namespace stoker::formats {

namespace {

// The innermost and outermost messages of an error stack.
std::string describe_stack(hid_t stack) {
  std::vector<std::string> messages;
  auto walk = [](unsigned, const H5E_error2_t* err, void* data) -> herr_t {
    auto* out = static_cast<std::vector<std::string>*>(data);
    if (err->desc && *err->desc) out->emplace_back(err->desc);
    return 0;
  };
  H5Ewalk2(stack, H5E_WALK_UPWARD, walk, &messages);
  if (messages.empty()) return {};
  // Innermost first: the deepest cause, then the call that reported it.
  std::string out = messages.front();
  if (messages.size() > 1 && messages.back() != messages.front()) out += " (" + messages.back() + ")";
  return out;
}

// The stack of the latest failure on this thread. The C++ API's objects close their handles while
// the exception unwinds, and every HDF5 call clears the error stack on entry, so by the time the
// exception is caught the stack is empty: HDF5 calls this handler at the failure itself instead.
thread_local std::string captured_detail;

herr_t capture_stack(hid_t stack, void*) {
  captured_detail = describe_stack(stack);
  return 0;
}

}  // namespace

Hdf5Quiet::Hdf5Quiet() noexcept {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, capture_stack, nullptr);
  captured_detail.clear();
}

Hdf5Quiet::~Hdf5Quiet() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

std::string hdf5_error_detail(const std::string& fallback) {
  std::string detail = describe_stack(H5E_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  if (detail.empty()) detail = std::exchange(captured_detail, {});
  captured_detail.clear();
  return detail.empty() ? fallback : detail;
}

void throw_hdf5(const std::string& context, const H5::Exception* e) {
  std::string fallback = "HDF5 call failed";
  if (e) fallback = e->getDetailMsg().empty() ? e->getFuncName() + " failed" : e->getDetailMsg();
  throw Error(ErrorCode::dataset, fmt::format("{}: {}", context, hdf5_error_detail(fallback)));
}

}  // namespace stoker::formats
