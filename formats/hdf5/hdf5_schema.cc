#include "formats/hdf5/hdf5_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/option_spelling.h"
#include "base/progress_note.h"
#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/hdf5_file.h"
#include "formats/hdf5/hdf5_types.h"
#include "formats/hdf5/storage_check.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

// A group whose members are named "0" .. "N-1" (decimal, no leading zeros): one sample each. The
// number of members, or 0 when the names are anything else.
std::uint64_t sample_group_size(const H5::H5File& file, const std::string& group, const std::string& path) {
  const auto context = [&] { return fmt::format("{}: listing group '{}'", path, group); };
  return hdf5_call(context, [&]() -> std::uint64_t {
    const H5::Group g = file.openGroup(group);
    const hsize_t n = g.getNumObjs();
    for (hsize_t i = 0; i < n; ++i) {
      detail::note_progress();  // a group of a million members takes its time (base/progress_note.h)
      const std::string name = g.getObjnameByIdx(i);
      if (name.empty() || name.size() > 19 || (name.size() > 1 && name[0] == '0') ||
          !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
          std::stoull(name) >= n) {
        return 0;  // distinct names, each a decimal below n: exactly 0 .. n-1
      }
    }
    return n;
  });
}

// The fields named in `wanted` (names, or paths like "train/images", relative to the group whose
// path ends in `base`), in that order: each a dataset or a sample group, or an error naming it.
std::vector<FieldSource> named_sources(const H5::H5File& file, const std::string& path,
                                       const std::vector<std::string>& wanted, const std::string& base) {
  std::vector<FieldSource> out;
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const auto& w = wanted[i];
    if (std::find(wanted.begin(), wanted.begin() + static_cast<std::ptrdiff_t>(i), w) !=
        wanted.begin() + static_cast<std::ptrdiff_t>(i)) {
      throw Error(ErrorCode::invalid_option, fmt::format("{}: field '{}' is selected twice", path, w));
    }
    const std::string full = base + w;
    const auto slash = full.find_last_of('/');
    const std::string parent_group = slash == std::string::npos ? "" : full.substr(0, slash);
    const std::string leaf = slash == std::string::npos ? full : full.substr(slash + 1);
    if (!parent_group.empty()) require_group(file, path, parent_group, fmt::format("unknown field '{}': ", w));
    const GroupListing here = list_group(file, parent_group, path);
    for (const auto& [name, what] : here.broken) {
      if (name == leaf) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: field '{}' is {}: restore what it names, or select other fields", path,
                                printable(w), what));
      }
    }
    if (std::find(here.datasets.begin(), here.datasets.end(), leaf) != here.datasets.end()) {
      out.push_back({w, full, 0});
      continue;
    }
    if (std::find(here.groups.begin(), here.groups.end(), leaf) != here.groups.end()) {
      const std::uint64_t n = sample_group_size(file, full, path);
      if (n == 0) {
        throw Error(ErrorCode::invalid_option,
                    fmt::format("{}: field '{}' is a group whose members are not named 0 .. N-1 (a sample group); "
                                "name the datasets in it instead ({})",
                                path, w, describe_listing(list_group(file, full, path), full)));
      }
      out.push_back({w, full, n});
      continue;
    }
    throw Error(ErrorCode::invalid_option,
                fmt::format("{}: unknown field '{}' ({})", path, w, describe_listing(here, parent_group)));
  }
  return out;
}

// Every dataset and sample group of `group`, which must all be deliverable: a dataset is never
// dropped silently. Other groups are containers: named in the error when there is nothing else.
std::vector<FieldSource> group_sources(const H5::H5File& file, const std::string& path, const std::string& group,
                                       const std::string& base) {
  std::vector<FieldSource> out;
  const GroupListing here = list_group(file, group, path);
  std::vector<std::string> cannot;
  for (const auto& [name, what] : here.broken) {
    cannot.push_back(fmt::format("'{}' ({}: restore what it names, or remove the link)", printable(name), what));
  }
  for (const auto& n : here.datasets) {
    const H5::DataSet dset = open_dataset(file, base + n, path);
    const TypeMatch m = hdf5_call([&] { return fmt::format("{}: dataset '{}'", path, printable(base + n)); },
                                  [&] { return match_type(dset); });
    if (!m.deliverable()) cannot.push_back(fmt::format("'{}' ({})", printable(n), m.why));
    out.push_back({n, base + n, 0});
  }
  std::vector<std::string> containers;
  for (const auto& g : here.groups) {
    if (const std::uint64_t members = sample_group_size(file, base + g, path)) {
      out.push_back({g, base + g, members});
    } else {
      containers.push_back(g);
    }
  }
  if (!cannot.empty()) {
    throw Error(ErrorCode::dataset,
                fmt::format("{}: cannot deliver every dataset of {}: {}; name the fields to load ({}) from: {}", path,
                            group_label(group), fmt::join(cannot, ", "), detail::option_name("fields"),
                            describe_listing(here, group)));
  }
  if (out.empty()) {
    std::string example;
    if (!containers.empty()) {
      const GroupListing first = list_group(file, base + containers.front(), path);
      std::vector<std::string> paths;
      for (const auto& d : first.datasets) paths.push_back(containers.front() + "/" + d);
      if (!paths.empty()) {
        example = fmt::format(", e.g. {} or {}", detail::option_set_to("fields", paths),
                              detail::option_set_to("group", base + containers.front()));
      }
    }
    throw Error(ErrorCode::dataset,
                fmt::format("{}: no datasets in {} (groups: {}); name the fields by path{}", path, group_label(group),
                            containers.empty() ? "none" : fmt::format("{}", fmt::join(containers, ", ")), example));
  }
  std::sort(out.begin(), out.end(), [](const FieldSource& a, const FieldSource& b) { return a.name < b.name; });
  return out;
}

}  // namespace

// Reads rank, dims and dtype of dataset `name`; throws for anything stoker cannot deliver.
Inspected inspect(const H5::DataSet& dset, const std::string& name, const std::string& path) {
  const std::string ctx = fmt::format("{}: dataset '{}'", path, printable(name));
  const auto context = [&] { return ctx; };
  return hdf5_call(context, [&] {
    TypeMatch m = match_type(dset);
    if (!m.dtype && !m.vlen_bytes) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: unsupported dtype ({}); stoker reads {}", ctx, m.why, kSupportedTypes));
    }
    if (const std::optional<std::string> why = unreadable_storage(dset, name, path)) {
      throw Error(ErrorCode::dataset, fmt::format("{}: {}", ctx, *why));
    }
    const H5::DataSpace space = dset.getSpace();
    const int rank = space.getSimpleExtentNdims();
    if (rank < 1)
      throw Error(ErrorCode::dataset, fmt::format("{}: is a scalar; a field needs a leading sample dimension", ctx));
    Inspected out;
    out.dims.resize(static_cast<std::size_t>(rank));
    space.getSimpleExtentDims(out.dims.data());
    if (out.dims[0] == 0) throw Error(ErrorCode::dataset, fmt::format("{}: is empty (0 samples)", ctx));
    if (m.vlen_bytes) {
      if (rank != 1) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: a variable-length dataset of rank {}; a bytes field is one-dimensional (one "
                                "element per sample)",
                                ctx, rank));
      }
      out.field = Field::bytes_field(name, m.elements);
      return out;
    }
    out.field.name = name;
    out.field.dtype = *m.dtype;
    for (int d = 1; d < rank; ++d) {
      if (out.dims[d] == 0) throw Error(ErrorCode::dataset, fmt::format("{}: has a zero-sized dimension {}", ctx, d));
      if (out.dims[d] > kMaxSampleBytes) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: dimension {} is {}, more than a sample may hold ({} bytes, kMaxSampleBytes)", ctx,
                                d, out.dims[d], kMaxSampleBytes));
      }
      out.field.shape.push_back(static_cast<std::int64_t>(out.dims[d]));
    }
    Schema one;
    one.fields = {out.field};
    one.validate(ctx);  // the sample's size, with overflow checks, before anything is allocated
    return out;
  });
}

// The field made of a sample group's members: bytes, each member's elements in C order and
// little-endian, all members of member "0"'s dtype.
Inspected inspect_members(const H5::H5File& file, const std::string& group, const std::string& name, std::uint64_t n,
                          const std::string& path, DType& member_dtype) {
  const std::string ctx = fmt::format("{}: group '{}'", path, printable(group));
  const auto context = [&] { return ctx; };
  return hdf5_call(context, [&] {
    const H5::DataSet first = file.openDataSet(group + "/0");
    const TypeMatch m = match_type(first);
    if (!m.numeric) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: member '0' holds {}; the members of a sample group must be numeric datasets ({})",
                              ctx, m.why.empty() ? "variable-length data" : m.why, kSupportedTypes));
    }
    if (const std::optional<std::string> why = unreadable_storage(first, group + "/0", path)) {
      throw Error(ErrorCode::dataset, fmt::format("{}: member '0': {}", ctx, *why));
    }
    member_dtype = *m.dtype;
    Inspected out;
    out.dims = {n};
    out.field = Field::bytes_field(name);
    return out;
  });
}

std::vector<FieldSource> field_sources(const H5::H5File& file, const std::string& path,
                                       const std::vector<std::string>& wanted, const std::string& group) {
  const std::string base = group.empty() ? "" : group + "/";
  if (!group.empty()) require_group(file, path, group, "");
  return wanted.empty() ? group_sources(file, path, group, base) : named_sources(file, path, wanted, base);
}

void check_same_n(const std::vector<Inspected>& cols, const std::string& path) {
  for (const auto& c : cols) {
    if (c.dims[0] != cols.front().dims[0]) {
      throw Error(
          ErrorCode::dataset,
          fmt::format("{}: fields with different numbers of samples: '{}' has {}, '{}' has {}", path,
                      printable(cols.front().field.name), cols.front().dims[0], printable(c.field.name), c.dims[0]));
    }
  }
}

Schema hdf5_schema(const std::string& path, const std::vector<std::string>& wanted, const std::string& group) {
  Hdf5Quiet quiet;
  const H5::H5File file = open_hdf5_file(path);
  std::vector<Inspected> cols;
  for (const auto& src : field_sources(file, path, wanted, group)) {
    DType member_dtype;
    cols.push_back(src.members ? inspect_members(file, src.object, src.name, src.members, path, member_dtype)
                               : inspect(open_dataset(file, src.object, path), src.name, path));
  }
  check_same_n(cols, path);
  Schema s;
  s.num_samples = cols.front().dims[0];
  for (auto& c : cols) s.fields.push_back(std::move(c.field));
  s.validate(path);
  return s;
}

}  // namespace stoker::formats
