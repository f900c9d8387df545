// The HDF5 file driver Hdf5Writer writes through: POSIX reads and writes, like HDF5's own sec2
// driver, except that a write that fails (ENOSPC, EFBIG, EDQUOT, EIO) is never reported to HDF5.
//
// Why: HDF5 1.10 does not survive a failed write. A flush that fails leaves its metadata cache in a
// state in which closing the file fails too, after the file's structure is freed but with its ID
// still registered; the next close of that ID (the C++ API's destructor, or H5close at exit) is a
// crash. So the driver records the first failure's errno (in a WriteStatus the writer owns, which
// outlives the file), keeps that write and every later one in memory, where reads find them, and
// answers HDF5 as if they had succeeded: HDF5 stays consistent, the file can be closed, and the
// writer turns the recorded errno into its error and has the file, now incomplete, removed.
// Memory after a failure grows only by what is written until the writer sees it (one call).
//
// Single-threaded, as HDF5's serial library is.
#pragma once

#include <hdf5.h>

namespace stoker::formats {

struct WriteStatus {
  int error = 0;  // the errno of the first write (or extension) of the file that failed; 0 if none
};

// Sets `fapl` to the driver, recording into `status` (which must outlive the file).
void use_write_driver(hid_t fapl, WriteStatus* status);

}  // namespace stoker::formats
