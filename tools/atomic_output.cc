#include "tools/atomic_output.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

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

void create_exclusive(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw Error::from_errno(errno, path + ": creating it");
  ::close(fd);
}

void refuse_symlink(const std::string& path, const std::string& tool) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: is a symbolic link; {} writes only a file it creates itself: remove the link", path,
                            tool));
  }
}

void move_into_place(const std::string& from, const std::string& to) {
  struct stat st;
  if (::lstat(to.c_str(), &st) == 0) {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(from);  // the old dataset, now at `from`
      fsync_dir(fs::absolute(to).parent_path().string());
      return;
    }
    if (errno != EINVAL && errno != ENOSYS)
      throw Error::from_errno(errno, fmt::format("{}: replacing it with {}", to, from));
    fs::remove_all(to);  // a file system that cannot exchange
  }
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw Error::from_errno(errno, fmt::format("{}: moving {} into place", to, from));
  fsync_dir(fs::absolute(to).parent_path().string());
}

}  // namespace stoker::tools
