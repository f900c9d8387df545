// The members read path (formats/hdf5/read_path.h): a group of datasets "0" .. "N-1" as a bytes
// field, each member's elements in C order and little-endian.
#include <fmt/format.h>

#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/hdf5_types.h"
#include "formats/hdf5/read_path.h"
#include "formats/hdf5/storage_check.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

class MemberRead final : public ReadPath {
 public:
  MemberRead(const H5::H5File& file, std::string path, std::string group, DType member_dtype, std::string where)
      : file_(file),
        path_(std::move(path)),
        group_(std::move(group)),
        member_dtype_(member_dtype),
        where_(std::move(where)) {}
  Kind kind() const noexcept override { return Kind::members; }

  void read(std::uint64_t start, std::uint64_t count, const FieldOut& out) override {
    for (std::uint64_t i = start; i < start + count; ++i) read_member(i, *out.bytes);
  }

  std::uint64_t sample_bytes(std::uint64_t i) override {
    const auto context = [&] { return fmt::format("{}: sample {}", where_, i); };
    return hdf5_call(context, [&]() -> std::uint64_t {
      const H5::DataSet d = file_.openDataSet(fmt::format("{}/{}", group_, i));
      return static_cast<std::uint64_t>(d.getSpace().getSimpleExtentNpoints()) * dtype_size(member_dtype_);
    });
  }

 private:
  void read_member(std::uint64_t i, VarBytes& out) {
    const auto where = [&] { return fmt::format("{}: sample {} (member '{}')", where_, i, i); };
    const H5::DataSet d = hdf5_call(where, [&] { return file_.openDataSet(fmt::format("{}/{}", group_, i)); });
    const TypeMatch m = hdf5_call(where, [&] { return match_type(d); });
    if (!m.dtype || *m.dtype != member_dtype_) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{} is {}, but the group's member '0' is {}: a sample group's members share one dtype",
                              where(), m.dtype ? std::string(dtype_name(*m.dtype)) : m.why, dtype_name(member_dtype_)));
    }
    // Checked member by member, as read (the schema scan checks member '0'): a member stored
    // outside the file, or with a filter HDF5 lacks, is an error naming its sample.
    if (const std::optional<std::string> why = unreadable_storage(d, fmt::format("{}/{}", group_, i), path_)) {
      throw Error(ErrorCode::dataset, fmt::format("{}: {}", where(), *why));
    }
    const auto elements =
        hdf5_call(where, [&] { return static_cast<std::uint64_t>(d.getSpace().getSimpleExtentNpoints()); });
    if (elements > kMaxSampleBytes / dtype_size(member_dtype_)) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{} holds {} elements, more than a sample may ({} bytes, kMaxSampleBytes)", where(),
                              elements, kMaxSampleBytes));
    }
    std::byte* dst = out.append(elements * dtype_size(member_dtype_));
    try {
      if (elements) hdf5_call(where, [&] { d.read(dst, little_endian_type_of(d)); });
    } catch (...) {
      out.pop_back();
      throw;
    }
  }

  const H5::H5File& file_;  // the reader's, which outlives the path
  std::string path_;
  std::string group_;
  DType member_dtype_;
  std::string where_;
};

}  // namespace

std::unique_ptr<ReadPath> member_read_path(const H5::H5File& file, std::string path, std::string group,
                                           DType member_dtype, std::string where) {
  return std::make_unique<MemberRead>(file, std::move(path), std::move(group), member_dtype, std::move(where));
}

}  // namespace stoker::formats
