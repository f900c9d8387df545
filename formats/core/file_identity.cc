#include "formats/core/file_identity.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

namespace stoker::formats {

std::optional<FileIdentity> FileIdentity::from_words(const std::vector<std::uint64_t>& w) {
  if (w.size() != 5) return std::nullopt;
  return FileIdentity{w[0], w[1], w[2], w[3], w[4]};
}

std::optional<FileIdentity> file_identity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  if (S_ISDIR(st.st_mode) && ::stat((path + "/data.mdb").c_str(), &st) != 0) return std::nullopt;
  return FileIdentity{
      static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
      static_cast<std::uint64_t>(st.st_size),
      static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(st.st_mtim.tv_nsec)};
}

std::string describe_change(const FileIdentity& was, const FileIdentity& now) {
  std::vector<std::string> what;
  // A cached remote shard's copy is another file after each fetch: only its content counts.
  const bool file = !was.by_content();
  if (file && (was.device != now.device || was.inode != now.inode))
    what.push_back("it is another file (device and inode)");
  if (was.size != now.size) what.push_back(fmt::format("its size ({} -> {} bytes)", was.size, now.size));
  if (file && was.mtime_ns != now.mtime_ns) what.push_back("its modification time");
  if (was.version != now.version) {
    what.push_back(fmt::format("its last LMDB transaction ({} -> {})", was.version, now.version));
  }
  return fmt::format("{}", fmt::join(what, ", "));
}

}  // namespace stoker::formats
