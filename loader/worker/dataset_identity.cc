#include "loader/worker/dataset_identity.h"

#include "formats/shard_set.h"

namespace stoker::detail {

std::optional<DatasetIdentity> dataset_identity(const std::string& path) {
  if (formats::is_shard_set(path)) return std::nullopt;  // checked shard by shard
  return formats::file_identity(path);
}

}  // namespace stoker::detail
