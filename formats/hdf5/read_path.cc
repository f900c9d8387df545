#include "formats/hdf5/read_path.h"

#include "stoker/error.h"

namespace stoker::formats {

std::uint64_t ReadPath::sample_bytes(std::uint64_t) {
  throw Error(ErrorCode::internal, "ReadPath::sample_bytes: not a bytes field");
}

}  // namespace stoker::formats
