// HDF5 errors turned into stoker::Error, keeping HDF5's own detail.
//
// stoker uses HDF5's C++ API (H5Cpp.h) for files, datasets, types, spaces and property lists, and
// its C API through getId() only where the C++ API has no call (chunk addresses, file locking).
// The C++ API's exceptions say which call failed ("H5Dread failed"), not why, and name no file;
// the why is on HDF5's error stack. hdf5_call() runs C++ API code and translates an H5::Exception
// into "<context>: <innermost message on the stack> (<outermost>)", e.g.
// "train.h5: dataset 'image': reading samples 0..255: truncated file: eof = 4096, stored_eof = 1048576".
#pragma once

#include <H5Cpp.h>

#include <string>
#include <utility>

#include "stoker/error.h"

namespace stoker::formats {

// While alive, HDF5 prints nothing and the error stack of a failure is kept for
// hdf5_error_detail(); the previous handler is restored after, so a user's own HDF5 settings are
// untouched (H5::Exception::dontPrint() would change them for good). Every stoker entry point
// into HDF5 holds one.
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

// The innermost and outermost messages of the failure's error stack (or `fallback` when none was
// kept); clears it.
std::string hdf5_error_detail(const std::string& fallback = "HDF5 call failed");

// Throws stoker::Error("<context>: <detail>") for the failure being handled.
[[noreturn]] void throw_hdf5(const std::string& context, const H5::Exception* e = nullptr);

// Runs `body` (C++ API calls); an H5::Exception becomes stoker::Error naming context(), which is
// only evaluated on failure.
template <class Context, class Body>
auto hdf5_call(Context&& context, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const H5::Exception& e) {
    throw_hdf5(context(), &e);
  }
}

}  // namespace stoker::formats
