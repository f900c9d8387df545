#include "tools/common/output_check.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <set>
#include <vector>

#include "formats/open_reader.h"
#include "stoker/error.h"
#include "tools/common/cli.h"

namespace stoker::tools {
namespace {

namespace fs = std::filesystem;

// What the tool writes, as messages name it.
std::string datasets_of(const OutputKind& kind) {
  if (kind.lmdb && kind.hdf5) return "an LMDB database nor an HDF5 file";
  return kind.lmdb ? "an LMDB database" : "an HDF5 file";
}
std::string not_ours(const OutputKind& kind) {
  return (kind.lmdb && kind.hdf5 ? "neither " : "not ") + datasets_of(kind);
}

std::optional<struct stat> lstat_of(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return st;
  if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
  throw Error::from_errno(errno, path);
}

// A regular file: whether it is a dataset `kind` writes (by its contents), and what it is.
Found inspect_file(const std::string& path, const struct stat& st, const OutputKind& kind, bool interrupted) {
  std::optional<Format> format;
  try {
    format = formats::detect_format(path);
  } catch (const Error&) {  // unreadable, or neither format: not a dataset
  }
  if (format) {
    const bool lmdb = *format == Format::lmdb;
    const std::string what = lmdb ? "an LMDB database" : "an HDF5 file";
    if (lmdb ? kind.lmdb : kind.hdf5) return {Found::Is::ours, what};
    return {Found::Is::foreign, fmt::format("{}, which {} does not write", what, kind.tool)};
  }
  if (st.st_size == 0) {
    // Created but not yet written: what an interrupted run leaves, never a finished output.
    if (interrupted) return {Found::Is::ours, "an empty file"};
    return {Found::Is::foreign, "an empty file, " + not_ours(kind)};
  }
  return {Found::Is::foreign,
          fmt::format("a file of {}, {}", binary_size(static_cast<double>(st.st_size)), not_ours(kind))};
}

std::string special_file(const struct stat& st) {
  if (S_ISFIFO(st.st_mode)) return "a named pipe";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  return "neither a file nor a directory";
}

std::string counted(std::size_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

struct Entry {
  std::string name;
  struct stat st;
};

// Whether regular file `e` is one a shard set holds beside its shards: the journal (and for an
// interrupted run the journal being replaced), or the lock file a reader that locks (py-lmdb's
// default) leaves beside an LMDB database.
bool beside_shards(const Entry& e, const std::set<std::string>& names, const OutputKind& kind, bool interrupted) {
  if (!kind.journal.empty() && (e.name == kind.journal || (interrupted && e.name == kind.journal + ".tmp")))
    return true;
  return kind.lmdb && e.name.ends_with("-lock") && names.contains(e.name.substr(0, e.name.size() - 5));
}

// Whether directory entry `e` of `dir` is part of what `kind` writes (a shard, a file beside the
// shards, and for an interrupted run the unfinished shard); otherwise what it is.
std::optional<std::string> foreign_entry(const std::string& dir, const Entry& e, const std::set<std::string>& names,
                                         const OutputKind& kind, bool interrupted) {
  const std::string name = printable(e.name);
  if (S_ISDIR(e.st.st_mode)) return name + " is a folder";
  if (S_ISLNK(e.st.st_mode)) return name + " is a symbolic link";
  if (!S_ISREG(e.st.st_mode)) return fmt::format("{} is {}", name, special_file(e.st));
  if (beside_shards(e, names, kind, interrupted)) return std::nullopt;
  const Found f = inspect_file(dir + "/" + e.name, e.st, kind, interrupted && e.name.ends_with(".partial"));
  if (f.is == Found::Is::ours) return std::nullopt;
  return fmt::format("{} is {}", name, f.what);
}

Found inspect_directory(const std::string& path, const OutputKind& kind, bool interrupted) {
  std::vector<Entry> entries;
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    Entry e{it->path().filename().string(), {}};
    if (::lstat(it->path().c_str(), &e.st) != 0) throw Error::from_errno(errno, it->path().string());
    entries.push_back(std::move(e));
  }
  if (ec) throw Error(ErrorCode::io, fmt::format("{}: listing it: {}", path, ec.message()));
  if (entries.empty()) return {Found::Is::ours, "an empty directory"};
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  std::set<std::string> names;
  for (const auto& e : entries) names.insert(e.name);
  // An LMDB environment: data.mdb, and the lock file of one opened with locking; both files.
  if (kind.lmdb && names.contains("data.mdb") && names.size() <= 2 &&
      (names.size() == 1 || names.contains("lock.mdb"))) {
    const bool files =
        std::all_of(entries.begin(), entries.end(), [](const Entry& e) { return S_ISREG(e.st.st_mode); });
    const Entry& data =
        *std::find_if(entries.begin(), entries.end(), [](const Entry& e) { return e.name == "data.mdb"; });
    if (files && inspect_file(path + "/data.mdb", data.st, kind, false).is == Found::Is::ours)
      return {Found::Is::ours, "an LMDB environment"};
  }
  // A shard set: every entry is a shard (or the journal). The contents are read only up to the
  // first entry that is none: a directory of a million photos is refused at its first.
  std::size_t files = 0, folders = 0;
  for (const auto& e : entries) (S_ISDIR(e.st.st_mode) ? folders : files) += 1;
  const auto holding = [&](const std::string& problem) {
    const std::string what = folders == 0 ? counted(files, "file", "files")
                             : files == 0
                                 ? counted(folders, "folder", "folders")
                                 : counted(files, "file", "files") + " and " + counted(folders, "folder", "folders");
    return Found{Found::Is::foreign, fmt::format("a directory holding {} ({})", what, problem)};
  };
  std::size_t shards = 0;
  for (const auto& e : entries) {
    if (auto problem = foreign_entry(path, e, names, kind, interrupted)) return holding(*problem);
    if (!beside_shards(e, names, kind, interrupted)) ++shards;
  }
  // A journal with no dataset beside it is no finished output (the tool removes its journal only
  // once the shards are in place): a file of someone else's that has the name.
  if (shards == 0 && !interrupted) return holding(fmt::format("{}, but no dataset", printable(entries.front().name)));
  return {Found::Is::ours, fmt::format("a shard set of {}", counted(shards, "dataset", "datasets"))};
}

}  // namespace

Found inspect_output(const std::string& path, const OutputKind& kind, bool interrupted) {
  const auto st = lstat_of(path);
  if (!st) return {};
  if (S_ISLNK(st->st_mode)) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(path, ec);
    return {Found::Is::foreign,
            ec ? std::string("a symbolic link") : "a symbolic link to " + printable(target.string())};
  }
  if (S_ISREG(st->st_mode)) return inspect_file(path, *st, kind, interrupted);
  if (S_ISDIR(st->st_mode)) return inspect_directory(path, kind, interrupted);
  return {Found::Is::foreign, special_file(*st)};
}

void check_output(const std::string& path, const OutputKind& kind, bool force) {
  const Found found = inspect_output(path, kind);
  if (found.is == Found::Is::nothing) return;
  if (found.is == Found::Is::foreign)
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: is {}: not replaced; name a new path", printable(path), found.what));
  if (!force)
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: already exists ({}); use --force to replace it", printable(path), found.what));
}

bool check_partial(const std::string& partial, const OutputKind& kind) {
  const Found found = inspect_output(partial, kind, true);
  if (found.is == Found::Is::foreign)
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: is {}, not an interrupted run of {}: not removed; remove it yourself or name a new "
                            "path",
                            printable(partial), found.what, kind.tool));
  return found.is == Found::Is::ours;
}

}  // namespace stoker::tools
