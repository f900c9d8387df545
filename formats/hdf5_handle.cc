#include "formats/hdf5_handle.h"

#include <fmt/format.h>

#include <vector>

#include "stoker/error.h"

namespace stoker::formats {

void Hid::reset() noexcept {
  if (id_ >= 0) {
    Hdf5Quiet quiet;
    H5Idec_ref(id_);
    H5Eclear2(H5E_DEFAULT);
  }
  id_ = H5I_INVALID_HID;
}

Hdf5Quiet::Hdf5Quiet() noexcept {
  H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

Hdf5Quiet::~Hdf5Quiet() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

std::string hdf5_error_detail() {
  std::vector<std::string> messages;
  auto walk = [](unsigned, const H5E_error2_t* err, void* data) -> herr_t {
    auto* out = static_cast<std::vector<std::string>*>(data);
    if (err->desc && *err->desc) out->emplace_back(err->desc);
    return 0;
  };
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk, &messages);
  H5Eclear2(H5E_DEFAULT);
  if (messages.empty()) return "HDF5 call failed";
  // Innermost first: the deepest cause, then the call that reported it.
  std::string out = messages.front();
  if (messages.size() > 1 && messages.back() != messages.front()) out += " (" + messages.back() + ")";
  return out;
}

void throw_hdf5(const std::string& context) { throw Error(fmt::format("{}: {}", context, hdf5_error_detail())); }

hid_t check_hid(hid_t id, const std::string& context) {
  if (id < 0) throw_hdf5(context);
  return id;
}

void check_herr(herr_t status, const std::string& context) {
  if (status < 0) throw_hdf5(context);
}

}  // namespace stoker::formats
