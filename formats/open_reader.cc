#include "formats/open_reader.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "base/option_spelling.h"
#include "base/posix_error.h"
#include "base/unique_fd.h"
#include "formats/hdf5/hdf5_reader.h"
#include "formats/lmdb/lmdb_reader.h"
#include "formats/shard_set.h"
#include "formats/sharded_reader.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

// Reads up to n bytes at offset; returns how many were read (0 at end of file).
std::size_t read_at(const std::string& path, void* buf, std::size_t n, off_t offset) {
  detail::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) detail::throw_open_errno(path);
  ssize_t got = ::pread(fd.get(), buf, n, offset);
  if (got < 0) detail::throw_errno(path);
  return static_cast<std::size_t>(got);
}

bool has_hdf5_signature(const std::string& path) {
  static constexpr unsigned char kSig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  // The signature sits at 0, or after a user block at 512, 1024, 2048, ...
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) detail::throw_open_errno(path);
  for (off_t off = 0; off + 8 <= st.st_size; off = off == 0 ? 512 : off * 2) {
    unsigned char buf[8];
    if (read_at(path, buf, 8, off) == 8 && std::memcmp(buf, kSig, 8) == 0) return true;
  }
  return false;
}

bool has_lmdb_magic(const std::string& file) {
  // Page 0 is a meta page: a 16-byte page header, then MDB_meta whose first word is 0xBEEFC0DE.
  unsigned char buf[20];
  if (read_at(file, buf, sizeof buf, 0) != sizeof buf) return false;
  std::uint32_t magic;
  std::memcpy(&magic, buf + 16, 4);
  return magic == 0xBEEFC0DEu;
}

}  // namespace

Format detect_format(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) detail::throw_open_errno(path);
  if (S_ISDIR(st.st_mode)) {
    std::string data = path + "/data.mdb";
    if (::access(data.c_str(), F_OK) != 0) {
      throw Error(ErrorCode::dataset, fmt::format("{}: is a directory without data.mdb: not an LMDB database", path));
    }
    return Format::lmdb;
  }
  if (has_hdf5_signature(path)) return Format::hdf5;
  if (has_lmdb_magic(path)) return Format::lmdb;
  throw Error(ErrorCode::dataset, fmt::format("{}: neither an HDF5 file nor an LMDB database", path));
}

std::unique_ptr<Reader> open_reader(const std::string& path, const ReaderOptions& options) {
  if (is_shard_set(path)) return std::make_unique<ShardedReader>(shard_paths(path), options);
  Format format = options.format == Format::auto_detect ? detect_format(path) : options.format;
  if (format == Format::hdf5) {
    if (!options.lmdb_keys.empty()) {
      throw Error(ErrorCode::invalid_option, fmt::format("{}: is an HDF5 file; {} names the keys of an LMDB database",
                                                         path, detail::option_name("lmdb_keys")));
    }
    return std::make_unique<Hdf5Reader>(path, options.fields, options.hdf5_path, options.group, options.sequential);
  }
  if (!options.group.empty()) {
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: is an LMDB database; a group ({}) names a place in an HDF5 file", path,
                            detail::option_name("group")));
  }
  return std::make_unique<LmdbReader>(path, options.fields, options.sequential,
                                      options.known ? &*options.known : nullptr, options.lmdb_keys,
                                      options.lmdb_count_key);
}

}  // namespace stoker::formats
