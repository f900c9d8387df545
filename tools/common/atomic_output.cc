#include "tools/common/atomic_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "stoker/error.h"

namespace stoker::tools {

namespace fs = std::filesystem;

void fsync_path(const std::string& path, int open_flags) {
  const int fd = ::open(path.c_str(), open_flags | O_CLOEXEC);
  if (fd < 0) throw Error::from_errno(errno, path + ": opening it to fsync");
  const int rc = ::fsync(fd), err = errno;
  ::close(fd);
  if (rc != 0) throw Error::from_errno(err, path + ": fsync");
}

void fsync_dir(const std::string& dir) { fsync_path(dir, O_RDONLY | O_DIRECTORY); }

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text;
    f.flush();
    if (!f) throw Error::from_errno(errno, tmp + ": writing it");
  }
  fsync_path(tmp, O_RDONLY);
  if (::rename(tmp.c_str(), path.c_str()) != 0) throw Error::from_errno(errno, path + ": writing it");
  fsync_dir(fs::absolute(path).parent_path().string());
}

void create_exclusive(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw Error::from_errno(errno, path + ": creating it");
  ::close(fd);
}

void refuse_symlink(const std::string& path, const std::string& tool) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    throw Error(
        ErrorCode::invalid_option,
        fmt::format("{}: is a symbolic link; {} writes only a file it creates itself: remove the link", path, tool));
  }
}

void move_into_place(const std::string& from, const std::string& to) {
  struct stat there, here;
  // rename(2) replaces a file atomically everywhere; a directory (of shards, an LMDB directory), or
  // a file by a directory, only by exchanging the two.
  const bool exchange = ::lstat(to.c_str(), &there) == 0 && ::lstat(from.c_str(), &here) == 0 &&
                        (S_ISDIR(there.st_mode) || S_ISDIR(here.st_mode));
  if (exchange) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
      std::error_code ignored;  // the new one is in place: an old one left behind is only litter
      fs::remove_all(from, ignored);
      fsync_dir(fs::absolute(to).parent_path().string());
      return;
    }
    if (errno != EINVAL && errno != ENOSYS && errno != ENOENT)
      throw Error::from_errno(errno, fmt::format("{}: replacing it with {}", to, from));
    if (errno != ENOENT) fs::remove_all(to);  // a file system that cannot exchange
  }
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw Error::from_errno(errno, fmt::format("{}: moving {} into place", to, from));
  fsync_dir(fs::absolute(to).parent_path().string());
}

}  // namespace stoker::tools
