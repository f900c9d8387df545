#include "remote/cache_record.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "base/posix_error.h"
#include "base/unique_fd.h"
#include "remote/content_digest.h"
#include "stoker/error.h"

namespace stoker::remote {
namespace {

// "stoker-cache 1 BOOT DIGEST\n", DIGEST 16 hex digits or "-" for a partial; padded with spaces to a
// fixed length, so that a rewrite replaces every byte in one write.
constexpr std::string_view kMagic = "stoker-cache 1 ";
constexpr std::size_t kRecordBytes = 96;
constexpr std::string_view kSynced = "synced";

void sync_path(const std::string& path, int flags) {
  const detail::UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC));
  if (!fd || ::fsync(fd.get()) != 0) throw Error::from_errno(errno, "syncing " + path);
}

}  // namespace

const std::string& this_boot() {
  static const std::string boot = [] {
    std::string id;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> id;
    return id.size() <= 64 ? id : std::string();
  }();
  return boot;
}

std::optional<CacheRecord> read_record(int lock_fd) {
  char text[kRecordBytes + 1] = {};
  const ssize_t n = ::pread(lock_fd, text, kRecordBytes, 0);
  if (n <= 0) return std::nullopt;
  std::string_view s(text, static_cast<std::size_t>(n));
  if (!s.starts_with(kMagic)) return std::nullopt;
  s.remove_prefix(kMagic.size());
  const std::size_t space = s.find(' ');
  if (space == 0 || space == std::string_view::npos) return std::nullopt;
  CacheRecord record{std::string(s.substr(0, space)), std::nullopt};
  s.remove_prefix(space + 1);
  if (s.starts_with("-")) return record;
  std::uint64_t digest = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + std::min<std::size_t>(s.size(), 16), digest, 16);
  if (error != std::errc() || end != s.data() + 16) return std::nullopt;
  record.digest = digest;
  return record;
}

void write_record(int lock_fd, const CacheRecord& record, const std::string& lock_path) {
  std::string text = fmt::format("{}{} {}", kMagic, record.boot,
                                 record.digest ? fmt::format("{:016x}", *record.digest) : std::string("-"));
  text.resize(kRecordBytes - 1, ' ');
  text += '\n';
  if (::pwrite(lock_fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw Error::from_errno(errno, "writing " + lock_path);
}

bool complete(const std::string& path, std::uint64_t size, int lock_fd) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) != size)
    return false;
  const std::string lock_path = path + ".lock";
  detail::UniqueFd own;
  bool writable = true;
  if (lock_fd < 0) {
    own.reset(::open(lock_path.c_str(), O_RDWR | O_CLOEXEC));
    if (!own) {  // a cache this process may read, not write: checked, its record left as it is
      own.reset(::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC));
      writable = false;
    }
    if (!own) return false;
  }
  const int lock = lock_fd < 0 ? own.get() : lock_fd;
  const auto trusted = [](const std::optional<CacheRecord>& r) {
    return r && r->digest && (r->boot == kSynced || (!this_boot().empty() && r->boot == this_boot()));
  };
  std::optional<CacheRecord> record = read_record(lock);
  if (!record || !record->digest) return false;
  if (trusted(record)) return true;
  // Written in another boot, and never synced: its bytes are read back and checked, under a shared
  // lock (a process fetching or deleting it holds it exclusively: then it is not complete here),
  // and the record read again under it.
  if (lock_fd < 0 && ::flock(lock, LOCK_SH | LOCK_NB) != 0) return false;
  struct Unlock {
    int fd;
    ~Unlock() {
      if (fd >= 0) (void)::flock(fd, LOCK_UN);
    }
  } unlock{lock_fd < 0 ? lock : -1};
  record = read_record(lock);
  if (!record || !record->digest) return false;
  if (trusted(record)) return true;
  const detail::UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!file) {
    if (errno == ENOENT) return false;
    throw Error::from_errno(errno, path);
  }
  if (::fstat(file.get(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) != size) return false;
  ContentDigest digest;
  digest.add_file(file.get(), size, path);
  if (digest.value() != *record->digest) return false;
  if (writable && !this_boot().empty()) {
    try {
      write_record(lock, CacheRecord{this_boot(), record->digest}, lock_path);
    } catch (const Error&) {  // checked again next time
    }
  }
  return true;
}

void start_partial(const std::string& path, const std::string& partial, int lock_fd) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw Error::from_errno(errno, "deleting " + path);
  const std::optional<CacheRecord> record = read_record(lock_fd);
  if (this_boot().empty() || !record || record->boot != this_boot()) {
    if (::unlink(partial.c_str()) != 0 && errno != ENOENT) throw Error::from_errno(errno, "deleting " + partial);
  }
  write_record(lock_fd, CacheRecord{this_boot().empty() ? std::string(kSynced) : this_boot(), std::nullopt},
               path + ".lock");
}

void name_complete(const std::string& partial, const std::string& path, std::uint64_t digest, int lock_fd) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (this_boot().empty()) sync_path(partial, O_RDONLY);
  if (::rename(partial.c_str(), path.c_str()) != 0) throw Error::from_errno(errno, "renaming " + partial);
  // Where nothing names the boot, the rename is made durable too: a crash after it leaves the file
  // named, not a partial again.
  if (this_boot().empty()) sync_path(dir, O_RDONLY | O_DIRECTORY);
  // Only now the record vouches for it: until then it says "a partial", and a process killed
  // before this line leaves a file that is fetched again.
  write_record(lock_fd, CacheRecord{this_boot().empty() ? std::string(kSynced) : this_boot(), digest}, path + ".lock");
}

}  // namespace stoker::remote
