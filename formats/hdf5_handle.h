// RAII for HDF5 identifiers, and HDF5 errors turned into stoker::Error.
//
// stoker uses HDF5's C API: the C++ API has no calls for chunk addresses or file locking, and its
// exceptions drop the file name.
#pragma once

#include <hdf5.h>

#include <string>
#include <utility>

namespace stoker::formats {

// Owns one hid_t of any type (file, dataset, dataspace, datatype, property list) and closes it
// with H5Idec_ref. Move-only.
class Hid {
 public:
  Hid() = default;
  explicit Hid(hid_t id) noexcept : id_(id) {}
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  ~Hid() { reset(); }

  hid_t get() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ >= 0; }
  void reset() noexcept;

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Stops HDF5 from printing its error stack while alive; restores the previous handler after, so
// a user's own HDF5 settings are untouched.
class Hdf5Quiet {
 public:
  Hdf5Quiet() noexcept;
  ~Hdf5Quiet();
  Hdf5Quiet(const Hdf5Quiet&) = delete;
  Hdf5Quiet& operator=(const Hdf5Quiet&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The innermost messages of HDF5's current error stack, then clears it.
std::string hdf5_error_detail();

// Throws stoker::Error("<context>: <HDF5's message>").
[[noreturn]] void throw_hdf5(const std::string& context);

// `id` when valid, else throw_hdf5(context).
hid_t check_hid(hid_t id, const std::string& context);
// Throws when status < 0.
void check_herr(herr_t status, const std::string& context);

}  // namespace stoker::formats
