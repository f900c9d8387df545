#include "formats/shard_set.h"

#include <dirent.h>
#include <fmt/format.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string_view>

#include "base/posix_error.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

bool has_glob(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

bool ends_with(std::string_view s, std::string_view end) {
  return s.size() >= end.size() && s.substr(s.size() - end.size()) == end;
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_lmdb_dir(const std::string& p) { return ::access((p + "/data.mdb").c_str(), F_OK) == 0; }

void expand_glob(const std::string& pattern, std::vector<std::string>& out) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &g);
  const std::unique_ptr<glob_t, void (*)(glob_t*)> free_it(&g, globfree);
  if (rc == GLOB_NOMATCH) {
    throw Error(ErrorCode::dataset, fmt::format("{}: no file matches the pattern", pattern));
  }
  if (rc != 0)
    throw Error(ErrorCode::io, fmt::format("{}: the pattern could not be read (glob error {})", pattern, rc));
  // glob() sorts its matches (strcoll; stoker compares bytes: the same order in every locale). An
  // LMDB file's lock file ("x.mdb-lock") is never a shard.
  std::vector<std::string> found;
  for (std::size_t i = 0; i < g.gl_pathc; ++i) {
    if (!ends_with(g.gl_pathv[i], "-lock")) found.emplace_back(g.gl_pathv[i]);
  }
  std::sort(found.begin(), found.end());
  out.insert(out.end(), found.begin(), found.end());
}

// Names a directory's shards have: HDF5 files and single-file LMDB databases. Anything else there
// (a README, a manifest, a lock file, an unfinished .partial) is not a shard.
bool is_shard_name(std::string_view name) {
  for (std::string_view ext : {".h5", ".hdf5", ".hdf", ".he5", ".lmdb", ".mdb"}) {
    if (ends_with(name, ext)) return true;
  }
  return false;
}

// The shards a directory holds: HDF5 files and LMDB databases by their names (is_shard_name), and
// directories holding data.mdb, sorted by name; hidden entries are not.
void expand_directory(const std::string& dir, std::vector<std::string>& out) {
  const std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) detail::throw_open_errno(dir);
  std::vector<std::string> found;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string_view name = e->d_name;
    if (name.empty() || name[0] == '.') continue;
    const std::string path = dir + (ends_with(dir, "/") ? "" : "/") + std::string(name);
    if (is_dir(path) ? is_lmdb_dir(path) : is_shard_name(name)) found.push_back(path);
  }
  if (found.empty()) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: a directory that holds no shard (no *.h5, *.hdf5, *.hdf, *.he5, *.lmdb or *.mdb "
                            "file, no LMDB directory) and no data.mdb",
                            dir));
  }
  std::sort(found.begin(), found.end());
  out.insert(out.end(), found.begin(), found.end());
}

}  // namespace

bool is_shard_set(const std::string& source) { return source.find('\n') != std::string::npos; }

std::vector<std::string> shard_paths(const std::string& source) {
  std::vector<std::string> out;
  std::size_t at = 0;
  for (;;) {
    const std::size_t nl = source.find('\n', at);
    out.push_back(source.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) return out;
    at = nl + 1;
  }
}

std::string resolve_source(const std::vector<std::string>& named) {
  std::vector<std::string> paths;
  for (const std::string& n : named) {
    if (n.find('\n') != std::string::npos) {
      throw Error(ErrorCode::invalid_option, fmt::format("a source path holds a newline: '{}'", n));
    }
    if (has_glob(n) && ::access(n.c_str(), F_OK) != 0) {
      expand_glob(n, paths);
    } else if (is_dir(n) && !is_lmdb_dir(n)) {
      expand_directory(n, paths);
    } else {
      paths.push_back(n);
    }
  }
  std::string out;
  for (const std::string& p : paths) out += (out.empty() ? "" : "\n") + p;
  return out;
}

std::string source_name(const std::string& source) {
  if (!is_shard_set(source)) return source;
  const std::vector<std::string> paths = shard_paths(source);
  return fmt::format("{} and {} more shard{}", paths.front(), paths.size() - 1, paths.size() == 2 ? "" : "s");
}

}  // namespace stoker::formats
