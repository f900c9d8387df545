#include "formats/hdf5/hdf5_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>

#include "base/posix_error.h"
#include "formats/hdf5/hdf5_errors.h"
#include "stoker/error.h"

namespace stoker::formats {

namespace {

// HDF5's stdio driver opens the file without O_CLOEXEC: whatever the trainer execs (a shell, a
// compiler, another program) would inherit it. It is marked right after the open (a thread that
// execs in between still inherits it: no HDF5 call takes the flag).
void set_close_on_exec(const H5::H5File& file, const std::string& path) {
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file.getId(), H5P_DEFAULT, &handle) < 0 || !handle) {
    throw_hdf5(path + ": getting the descriptor HDF5 opened");
  }
  const int fd = ::fileno(*static_cast<FILE**>(handle));  // the stdio driver hands out its FILE*'s address
  const int flags = fd < 0 ? -1 : ::fcntl(fd, F_GETFD);
  if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
    detail::throw_errno(path + ": marking HDF5's descriptor close-on-exec");
  }
}

// What the link `name` of `group`, which leads to no object, says.
std::string describe_broken_link(hid_t group, const std::string& name) {
  H5L_info_t info;
  if (H5Lget_info(group, name.c_str(), &info, H5P_DEFAULT) < 0) {
    return fmt::format("a link HDF5 cannot read: {}", hdf5_error_detail());
  }
  if (info.type == H5L_TYPE_HARD) return fmt::format("an object HDF5 cannot open: {}", hdf5_error_detail());
  if (info.type != H5L_TYPE_SOFT && info.type != H5L_TYPE_EXTERNAL) return "a user-defined link HDF5 cannot follow";
  std::vector<char> value(info.u.val_size + 1, '\0');
  if (H5Lget_val(group, name.c_str(), value.data(), info.u.val_size, H5P_DEFAULT) < 0) {
    return fmt::format("a link HDF5 cannot read: {}", hdf5_error_detail());
  }
  if (info.type == H5L_TYPE_SOFT) {
    return fmt::format("a soft link to '{}', which leads nowhere", printable(value.data()));
  }
  unsigned flags = 0;
  const char* file = nullptr;
  const char* object = nullptr;
  if (H5Lunpack_elink_val(value.data(), info.u.val_size, &flags, &file, &object) < 0 || !file || !object) {
    return fmt::format("an external link HDF5 cannot read: {}", hdf5_error_detail());
  }
  H5Eclear2(H5E_DEFAULT);
  return fmt::format(
      "an external link to '{}' in '{}', which cannot be followed (that file is not found, not HDF5, or holds no such "
      "object; HDF5 looks for a relative name beside this file and in the working directory, HDF5_EXT_PREFIX adds "
      "directories)",
      printable(object), printable(file));
}

}  // namespace

H5::H5File open_hdf5_file(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) detail::throw_open_errno(path);
  if (S_ISDIR(st.st_mode)) throw Error(ErrorCode::dataset, fmt::format("{}: is a directory, not an HDF5 file", path));
  bool is_hdf5 = false;
  try {
    is_hdf5 = H5::H5File::isHdf5(path);
  } catch (const H5::Exception&) {
    H5Eclear2(H5E_DEFAULT);
  }
  if (!is_hdf5) throw Error(ErrorCode::dataset, fmt::format("{}: not an HDF5 file (no HDF5 signature)", path));
  const auto context = [&] { return path + ": cannot open"; };
  return hdf5_call(context, [&] {
    H5::FileAccPropList fapl;
    fapl.setStdio();
    // No C++ call for file locking: a read-only loader must not take (or wait for) the file lock.
    if (H5Pset_file_locking(fapl.getId(), false, true) < 0) throw_hdf5(path + ": disabling file locking");
    H5::H5File file(path, H5F_ACC_RDONLY, H5::FileCreatPropList::DEFAULT, fapl);
    set_close_on_exec(file, path);
    return file;
  });
}

// "the root group" or "group 'train'".
std::string group_label(const std::string& group) {
  return group.empty() ? "the root group" : fmt::format("group '{}'", group);
}

GroupListing list_group(const H5::H5File& file, const std::string& group, const std::string& path) {
  const auto context = [&] { return fmt::format("{}: listing {}", path, group_label(group)); };
  return hdf5_call(context, [&] {
    const H5::Group g = file.openGroup(group.empty() ? "/" : group);
    GroupListing out;
    const hsize_t n = g.getNumObjs();
    for (hsize_t i = 0; i < n; ++i) {
      std::string name = g.getObjnameByIdx(i);
      H5O_type_t type = H5O_TYPE_UNKNOWN;
      try {
        type = g.childObjType(name);
      } catch (const H5::Exception&) {
        H5Eclear2(H5E_DEFAULT);
        std::string what = describe_broken_link(g.getId(), name);
        out.broken.emplace_back(std::move(name), std::move(what));
        continue;
      }
      if (type == H5O_TYPE_DATASET) {
        out.datasets.push_back(std::move(name));
      } else if (type == H5O_TYPE_GROUP) {
        out.groups.push_back(std::move(name));
      }
    }
    return out;
  });
}

// "datasets in the root group: a, b; groups: train" (for errors).
std::string describe_listing(const GroupListing& l, const std::string& group) {
  std::string broken;
  for (const auto& [name, what] : l.broken)
    broken += (broken.empty() ? "; links that lead nowhere: " : ", ") + printable(name);
  const auto names = [](const std::vector<std::string>& list) {
    std::vector<std::string> shown;
    shown.reserve(list.size());
    for (const auto& n : list) shown.push_back(printable(n));
    return list.empty() ? std::string("none") : fmt::format("{}", fmt::join(shown, ", "));
  };
  return fmt::format("datasets in {}: {}; groups: {}{}", group_label(group), names(l.datasets), names(l.groups),
                     broken);
}

H5::DataSet open_dataset(const H5::H5File& file, const std::string& name, const std::string& path,
                         const H5::DSetAccPropList& dapl) {
  return hdf5_call([&] { return fmt::format("{}: dataset '{}'", path, name); },
                   [&] { return file.openDataSet(name, dapl); });
}

// Checks that every level of `group` ("a/b/c") exists; the error names the first that does not and
// what its parent holds, after `prefix` (e.g. "unknown field 'x': ").
void require_group(const H5::H5File& file, const std::string& path, const std::string& group,
                   const std::string& prefix) {
  std::string parent;
  for (std::size_t start = 0; start <= group.size();) {
    const auto end = std::min(group.find('/', start), group.size());
    const std::string part = group.substr(start, end - start);
    const GroupListing up = list_group(file, parent, path);
    if (std::find(up.groups.begin(), up.groups.end(), part) == up.groups.end()) {
      throw Error(ErrorCode::invalid_option,
                  fmt::format("{}: {}no group '{}' ({})", path, prefix, parent.empty() ? part : parent + "/" + part,
                              describe_listing(up, parent)));
    }
    parent = parent.empty() ? part : parent + "/" + part;
    start = end + 1;
  }
}

}  // namespace stoker::formats
