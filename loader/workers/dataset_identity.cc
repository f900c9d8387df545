#include "loader/workers/dataset_identity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include "formats/shard_set.h"
#include "loader/base/splitmix64.h"

namespace stoker::detail {

std::optional<DatasetIdentity> DatasetIdentity::from_words(const std::vector<std::uint64_t>& w) {
  if (w.size() != 5) return std::nullopt;
  return DatasetIdentity{w[0], w[1], w[2], w[3], w[4]};
}

std::optional<DatasetIdentity> dataset_identity(const std::string& path) {
  if (formats::is_shard_set(path)) {
    // The shards' identities folded into one: any shard replaced, resized or touched changes it.
    DatasetIdentity set;
    for (const std::string& shard : formats::shard_paths(path)) {
      const std::optional<DatasetIdentity> one = dataset_identity(shard);
      if (!one) return std::nullopt;
      set.device = splitmix64_mix(set.device ^ one->device);
      set.inode = splitmix64_mix(set.inode ^ one->inode);
      set.size += one->size;
      set.mtime_ns = splitmix64_mix(set.mtime_ns ^ one->mtime_ns);
    }
    return set;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (S_ISDIR(st.st_mode) && ::stat((path + "/data.mdb").c_str(), &st) != 0) return std::nullopt;
  return DatasetIdentity{
      static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
      static_cast<std::uint64_t>(st.st_size),
      static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(st.st_mtim.tv_nsec)};
}

std::string describe_change(const DatasetIdentity& was, const DatasetIdentity& now) {
  std::vector<std::string> what;
  if (was.device != now.device || was.inode != now.inode) what.push_back("it is another file (device and inode)");
  if (was.size != now.size) what.push_back(fmt::format("its size ({} -> {} bytes)", was.size, now.size));
  if (was.mtime_ns != now.mtime_ns) what.push_back("its modification time");
  if (was.version != now.version) {
    what.push_back(fmt::format("its last LMDB transaction ({} -> {})", was.version, now.version));
  }
  return fmt::format("{}", fmt::join(what, ", "));
}

}  // namespace stoker::detail
