#include "formats/hdf5/storage_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/hdf5_file.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

// A chain of virtual datasets (one whose source is virtual, and so on) deeper than this is refused.
constexpr int kMaxVirtualDepth = 8;

// The names of well-known filters, for a pipeline that records none.
std::string_view known_filter_name(H5Z_filter_t id) {
  switch (id) {
    case H5Z_FILTER_DEFLATE: return "deflate";
    case H5Z_FILTER_SHUFFLE: return "shuffle";
    case H5Z_FILTER_FLETCHER32: return "fletcher32";
    case H5Z_FILTER_SZIP: return "szip";
    case H5Z_FILTER_NBIT: return "nbit";
    case H5Z_FILTER_SCALEOFFSET: return "scaleoffset";
    case 307: return "bzip2";
    case 32000: return "lzf";
    case 32001: return "blosc";
    case 32004: return "lz4";
    case 32008: return "bitshuffle";
    case 32015: return "zstd";
    case 32026: return "blosc2";
    default: return "";
  }
}

// A string an HDF5 C call writes into a buffer: `get(buf, size)` returns the length without the
// NUL (or a negative value on failure), as H5Pget_virtual_filename and its kind do.
template <class Get>
std::string hdf5_string(const std::string& where, const char* what, Get&& get) {
  const auto n = get(nullptr, 0);
  if (n < 0) throw_hdf5(fmt::format("{}: reading {}", where, what));
  std::string s(static_cast<std::size_t>(n) + 1, '\0');
  if (get(s.data(), s.size()) < 0) throw_hdf5(fmt::format("{}: reading {}", where, what));
  s.resize(static_cast<std::size_t>(n));
  return s;
}

std::optional<std::string> missing_filter(hid_t dcpl, const std::string& where) {
  const int n = H5Pget_nfilters(dcpl);
  if (n < 0) throw_hdf5(where + ": reading its filters");
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t nelmts = 0;
    char name[256] = {};
    const H5Z_filter_t id =
        H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nelmts, nullptr, sizeof name, name, &config);
    if (id < 0) throw_hdf5(fmt::format("{}: reading filter {} of its pipeline", where, i));
    name[sizeof name - 1] = '\0';
    const std::string label = name[0] ? printable(name) : std::string(known_filter_name(id));
    // HDF5 looks for a plugin (HDF5_PLUGIN_PATH) when the filter is not registered.
    const htri_t available = H5Zfilter_avail(id);
    unsigned info = 0;
    const bool decodes =
        available > 0 && H5Zget_filter_info(id, &info) >= 0 && (info & H5Z_FILTER_CONFIG_DECODE_ENABLED);
    H5Eclear2(H5E_DEFAULT);
    if (!decodes) {
      return fmt::format(
          "compressed with filter {}{}, which is not available{}: re-save the file with gzip (h5repack -f GZIP=4 "
          "IN OUT) or install the filter's HDF5 plugin and set HDF5_PLUGIN_PATH to its directory",
          id, label.empty() ? std::string() : fmt::format(" ({})", label),
          available > 0 ? " for decoding (this HDF5 only encodes it)" : " in this HDF5");
    }
  }
  return std::nullopt;
}

std::optional<std::string> external_storage(hid_t dcpl, const std::string& where) {
  const int n = H5Pget_external_count(dcpl);
  if (n < 0) throw_hdf5(where + ": reading its storage");
  if (n == 0) return std::nullopt;
  char name[4096] = {};
  off_t offset = 0;
  hsize_t size = 0;
  if (H5Pget_external(dcpl, 0, sizeof name, name, &offset, &size) < 0) throw_hdf5(where + ": reading its storage");
  name[sizeof name - 1] = '\0';
  return fmt::format(
      "its data is stored outside the HDF5 file, in '{}'{} (external storage): stoker does not read external "
      "storage, which may name any file on this machine; copy the data into the file (h5repack -l CONTI IN OUT, run "
      "where the external files are found)",
      printable(name), n > 1 ? fmt::format(" and {} more files", n - 1) : std::string());
}

// "%%" is a '%'; any other '%' makes `name` a pattern ("%b": a block number).
bool is_pattern(std::string_view name) {
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '%') continue;
    if (i + 1 < name.size() && name[i + 1] == '%') {
      ++i;
    } else {
      return true;
    }
  }
  return false;
}

std::string unescape_percent(std::string_view name) {
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    out += name[i];
    if (name[i] == '%' && i + 1 < name.size() && name[i + 1] == '%') ++i;
  }
  return out;
}

// Where HDF5 (1.10's H5F_prefix_open_file) looks for the source file `name` of a virtual dataset
// in the file at `vds_path`, in its order: the name itself when absolute, then (with only its last
// component when that failed) each directory of HDF5_VDS_PREFIX (${ORIGIN}: the virtual dataset's
// directory), the virtual dataset's directory, the working directory, and the directory of the
// file's resolved path.
std::vector<std::string> source_candidates(const std::string& name, const std::string& vds_path) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  const auto add = [&](const fs::path& p) {
    const std::string s = p.lexically_normal().string();
    for (const auto& o : out) {
      if (o == s) return;
    }
    out.push_back(s);
  };
  std::error_code ec;
  const fs::path vds_dir = fs::absolute(fs::path(vds_path), ec).parent_path();
  std::string rel = name;
  if (fs::path(name).is_absolute()) {
    add(name);
    rel = fs::path(name).filename().string();
  }
  if (const char* env = std::getenv("HDF5_VDS_PREFIX")) {
    std::string_view prefixes(env);
    while (!prefixes.empty()) {
      const std::size_t colon = std::min(prefixes.find(':'), prefixes.size());
      std::string prefix(prefixes.substr(0, colon));
      prefixes.remove_prefix(std::min(colon + 1, prefixes.size()));
      if (prefix.empty()) continue;
      if (prefix.rfind("${ORIGIN}", 0) == 0) prefix = vds_dir.string() + prefix.substr(9);
      add(fs::path(prefix) / rel);
    }
  }
  add(vds_dir / rel);
  add(fs::absolute(fs::path(rel), ec));
  const fs::path resolved = fs::canonical(fs::path(vds_path), ec);
  if (!ec) add(resolved.parent_path() / rel);
  return out;
}

// An HDF5 C API handle, closed on destruction.
struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  ~Handle() {
    if (id >= 0) close(id);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

// The virtual datasets' sources checked so far (file, dataset), so that a dataset of many
// mappings onto one source checks it once (and one that names itself ends).
struct VirtualCheck {
  std::map<std::string, H5::H5File> files;
  std::set<std::pair<std::string, std::string>> checked;
};

std::optional<std::string> check(hid_t dset, const std::string& path, const std::string& where, int depth,
                                 VirtualCheck& seen);

// The first of `candidates` that is an HDF5 file (opened once, kept in `seen`): its path and id, or
// an empty path when none is.
std::pair<std::string, hid_t> find_source_file(const std::vector<std::string>& candidates, VirtualCheck& seen) {
  for (const auto& c : candidates) {
    if (auto it = seen.files.find(c); it != seen.files.end()) return {c, it->second.getId()};
    struct stat st;
    if (::stat(c.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    try {
      return {c, seen.files.emplace(c, open_hdf5_file(c)).first->second.getId()};
    } catch (const Error&) {
      continue;  // not HDF5: HDF5 looks further too
    }
  }
  return {std::string(), -1};
}

// Whether virtual mapping `i` of `dcpl` lies within its source dataset `source` as it is now: all
// of it (the virtual selection's number of elements, as HDF5 requires), or a selection whose
// bounds it holds (an unlimited one has none: HDF5 reads as much of the source as there is).
// `dims`: the source's shape, for the message.
bool mapping_fits(hid_t dcpl, std::size_t i, hid_t source, const std::string& where, std::vector<hsize_t>& dims) {
  const Handle space(H5Pget_virtual_srcspace(dcpl, i), H5Sclose);
  if (space.id < 0) throw_hdf5(where + ": reading a virtual mapping's selection");
  const Handle now(H5Dget_space(source), H5Sclose);
  const int source_rank = now.id < 0 ? -1 : H5Sget_simple_extent_ndims(now.id);
  if (source_rank < 0) throw_hdf5(where + ": reading its shape");
  dims.assign(static_cast<std::size_t>(source_rank), 0);
  H5Sget_simple_extent_dims(now.id, dims.data(), nullptr);
  bool fits = true;
  if (H5Sget_select_type(space.id) == H5S_SEL_ALL) {
    const Handle virtual_space(H5Pget_virtual_vspace(dcpl, i), H5Sclose);
    if (virtual_space.id < 0) throw_hdf5(where + ": reading a virtual mapping's selection");
    fits = H5Sget_select_npoints(virtual_space.id) == H5Sget_simple_extent_npoints(now.id);
  } else {
    const int rank = H5Sget_simple_extent_ndims(space.id);
    std::vector<hsize_t> start(static_cast<std::size_t>(std::max(rank, 0))), end(start.size());
    if (rank > 0 && H5Sget_select_type(space.id) != H5S_SEL_NONE &&
        H5Sget_select_bounds(space.id, start.data(), end.data()) >= 0) {
      fits = dims.size() == end.size();
      for (std::size_t d = 0; fits && d < dims.size(); ++d) fits = end[d] < dims[d];
    }
  }
  H5Eclear2(H5E_DEFAULT);
  return fits;
}

std::optional<std::string> missing_source(hid_t dset, hid_t dcpl, const std::string& path, const std::string& where,
                                          int depth, VirtualCheck& seen) {
  if (depth >= kMaxVirtualDepth) {
    return fmt::format(
        "a virtual dataset whose sources are virtual datasets {} levels deep: re-save it with its "
        "data (h5repack -l CONTI IN OUT)",
        kMaxVirtualDepth);
  }
  std::size_t count = 0;
  if (H5Pget_virtual_count(dcpl, &count) < 0) throw_hdf5(where + ": reading its virtual mappings");
  const std::string repack = "or re-save the dataset with its data (h5repack -l CONTI IN OUT)";
  for (std::size_t i = 0; i < count; ++i) {
    const std::string file_name = hdf5_string(where, "a virtual mapping's file", [&](char* buf, std::size_t n) {
      return H5Pget_virtual_filename(dcpl, i, buf, n);
    });
    const std::string dset_name = hdf5_string(where, "a virtual mapping's dataset", [&](char* buf, std::size_t n) {
      return H5Pget_virtual_dsetname(dcpl, i, buf, n);
    });
    const std::string mapping = fmt::format("mapping {} of {}", i + 1, count);
    if (is_pattern(file_name) || is_pattern(dset_name)) {
      return fmt::format(
          "a virtual dataset whose sources are named by a pattern ('{}', dataset '{}', {}): stoker cannot check that "
          "each exists, and HDF5 reads a missing one as the fill value; {}",
          printable(file_name), printable(dset_name), mapping, repack);
    }
    const std::string source_file = unescape_percent(file_name), source_dset = unescape_percent(dset_name);
    // The file holding the source: this one ("."), or the first found where HDF5 looks.
    std::string found_path;
    Handle this_file(-1, H5Fclose);
    hid_t found = -1;
    if (source_file == ".") {
      found_path = path;
      this_file.id = H5Iget_file_id(dset);
      if (this_file.id < 0) throw_hdf5(where + ": finding its file");
      found = this_file.id;
    } else {
      const std::vector<std::string> candidates = source_candidates(source_file, path);
      std::tie(found_path, found) = find_source_file(candidates, seen);
      if (found_path.empty()) {
        std::vector<std::string> shown;
        shown.reserve(candidates.size());
        for (const auto& c : candidates) shown.push_back(printable(c));
        return fmt::format(
            "a virtual dataset whose source file '{}' ({}) is not found (looked for as {}), and HDF5 reads a missing "
            "source as the fill value: put the file where the virtual dataset names it (HDF5_VDS_PREFIX adds "
            "directories), {}",
            printable(source_file), mapping, fmt::join(shown, ", "), repack);
      }
    }
    // Relative to the source file's root, as HDF5 opens it.
    const Handle source(H5Dopen2(found, source_dset.c_str(), H5P_DEFAULT), H5Dclose);
    if (source.id < 0) {
      H5Eclear2(H5E_DEFAULT);
      return fmt::format(
          "a virtual dataset whose source dataset '{}' is not in '{}' ({}), and HDF5 reads a missing source as the "
          "fill value: restore it, {}",
          printable(source_dset), printable(found_path), mapping, repack);
    }
    std::vector<hsize_t> dims;
    if (!mapping_fits(dcpl, i, source.id, where + ": source '" + source_dset + "'", dims)) {
      return fmt::format(
          "a virtual dataset whose {} does not fit its source '{}' in '{}' (of shape ({})): restore the source, {}",
          mapping, printable(source_dset), printable(found_path), fmt::join(dims, ", "), repack);
    }
    if (!seen.checked.emplace(found_path, source_dset).second) continue;
    const std::string source_where = fmt::format("{}: dataset '{}'", found_path, printable(source_dset));
    if (auto why = check(source.id, found_path, source_where, depth + 1, seen)) {
      return fmt::format("a virtual dataset whose source '{}' in '{}' ({}) cannot be read as stored: {}",
                         printable(source_dset), printable(found_path), mapping, *why);
    }
  }
  return std::nullopt;
}

std::optional<std::string> check(hid_t dset, const std::string& path, const std::string& where, int depth,
                                 VirtualCheck& seen) {
  const Handle plist(H5Dget_create_plist(dset), H5Pclose);
  if (plist.id < 0) throw_hdf5(where + ": reading its creation properties");
  const hid_t dcpl = plist.id;
  if (auto why = external_storage(dcpl, where)) return why;
  if (auto why = missing_filter(dcpl, where)) return why;
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  if (layout < 0) throw_hdf5(where + ": reading its layout");
  if (layout == H5D_VIRTUAL) return missing_source(dset, dcpl, path, where, depth, seen);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> unreadable_storage(const H5::DataSet& dset, const std::string& name,
                                              const std::string& path) {
  VirtualCheck seen;
  return check(dset.getId(), path, fmt::format("{}: dataset '{}'", path, printable(name)), 0, seen);
}

}  // namespace stoker::formats
