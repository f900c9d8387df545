// The vlen read path (formats/hdf5/read_path.h): a dataset delivered as a bytes field, one sample a
// run of bytes: variable-length numbers (their little-endian bytes), variable-length strings, and
// fixed-length strings without their padding (formats/hdf5/hdf5_types.h, BytesSource).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <vector>

#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/hdf5_types.h"
#include "formats/hdf5/read_path.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

// The memory type a bytes field's dataset is read as: its numbers little-endian, its strings as
// stored (HDF5 converts no character set).
H5::DataType memory_type(const H5::DataSet& dset, BytesSource source) {
  if (source == BytesSource::vlen_numbers) {
    const H5::DataType base = dset.getVarLenType().getSuper();
    if (base.getClass() == H5T_INTEGER) {
      H5::IntType t;
      t.copy(base);
      t.setOrder(H5T_ORDER_LE);
      return H5::VarLenType(&t);
    }
    H5::FloatType t;
    t.copy(base);
    t.setOrder(H5T_ORDER_LE);
    return H5::VarLenType(&t);
  }
  H5::StrType t;
  t.copy(dset.getStrType());
  return t;
}

class VlenRead final : public ReadPath {
 public:
  VlenRead(const H5::DataSet& dset, std::string where)
      : dset_(dset),
        file_space_(dset_.getSpace()),
        source_(match_type(dset_).bytes_source),
        mem_type_(memory_type(dset_, source_)),
        where_(std::move(where)) {
    if (source_ == BytesSource::vlen_numbers) element_bytes_ = dset_.getVarLenType().getSuper().getSize();
    if (source_ == BytesSource::fixed_string) {
      element_bytes_ = mem_type_.getSize();
      pad_ = dset_.getStrType().getStrpad();
    }
  }
  Kind kind() const noexcept override { return Kind::vlen; }

  // In runs of at most 64 samples: no allocation per batch.
  void read(std::uint64_t start, std::uint64_t count, const FieldOut& out) override {
    while (count > 0) {
      const hsize_t n = std::min<std::uint64_t>(count, kRun);
      const auto context = [&] { return fmt::format("{}: reading samples {}..{}", where_, start, start + n - 1); };
      hdf5_call(context, [&] { read_run(start, n, *out.bytes); });
      start += n;
      count -= n;
    }
  }

  std::uint64_t sample_bytes(std::uint64_t i) override {
    one_.clear();
    FieldOut out;
    out.bytes = &one_;
    read(i, 1, out);
    return one_.total();
  }

 private:
  static constexpr hsize_t kRun = 64;

  void append(std::uint64_t sample, const void* data, std::uint64_t bytes, VarBytes& out) const {
    if (bytes > kMaxSampleBytes) {
      throw Error(ErrorCode::dataset,
                  fmt::format("{}: sample {} holds {} bytes, more than a sample may ({} bytes, kMaxSampleBytes)",
                              where_, sample, bytes, kMaxSampleBytes));
    }
    std::byte* dst = out.append(bytes);
    if (bytes) std::memcpy(dst, data, bytes);
  }

  void read_run(std::uint64_t start, hsize_t n, VarBytes& out) {
    hsize_t offset = start, extent = n;
    file_space_.selectHyperslab(H5S_SELECT_SET, &extent, &offset);
    const H5::DataSpace mem_space(1, &extent);
    if (source_ == BytesSource::fixed_string) {
      fixed_.resize(n * element_bytes_);
      dset_.read(fixed_.data(), mem_type_, mem_space, file_space_);
      for (hsize_t k = 0; k < n; ++k) {
        const char* s = fixed_.data() + k * element_bytes_;
        std::size_t len = element_bytes_;
        // The padding is not the string's: trailing NULs (numpy's S16, NULLPAD) or spaces
        // (Fortran's, SPACEPAD); a NUL-terminated string ends at its first NUL.
        if (pad_ == H5T_STR_NULLTERM) {
          len = static_cast<std::size_t>(std::find(s, s + len, '\0') - s);
        } else {
          const char pad = pad_ == H5T_STR_SPACEPAD ? ' ' : '\0';
          while (len > 0 && s[len - 1] == pad) --len;
        }
        append(start + k, s, len, out);
      }
      return;
    }
    void* buf = source_ == BytesSource::vlen_string ? static_cast<void*>(strings_) : static_cast<void*>(staged_);
    dset_.read(buf, mem_type_, mem_space, file_space_);
    // HDF5 allocated each sample's data: give it back even when copying fails.
    struct Reclaim {
      const H5::DataType& type;
      const H5::DataSpace& space;
      void* buf;
      ~Reclaim() { H5Dvlen_reclaim(type.getId(), space.getId(), H5P_DEFAULT, buf); }
    } reclaim{mem_type_, mem_space, buf};
    for (hsize_t k = 0; k < n; ++k) {
      if (source_ == BytesSource::vlen_string) {
        append(start + k, strings_[k], strings_[k] ? std::strlen(strings_[k]) : 0, out);
      } else {
        if (staged_[k].len > kMaxSampleBytes / element_bytes_) {
          throw Error(ErrorCode::dataset,
                      fmt::format("{}: sample {} holds {} elements of {} bytes, more than a sample may ({} bytes, "
                                  "kMaxSampleBytes)",
                                  where_, start + k, staged_[k].len, element_bytes_, kMaxSampleBytes));
        }
        append(start + k, staged_[k].p, staged_[k].len * element_bytes_, out);
      }
    }
  }

  H5::DataSet dset_;
  H5::DataSpace file_space_;
  BytesSource source_;
  H5::DataType mem_type_;
  std::string where_;
  std::size_t element_bytes_ = 1;
  H5T_str_t pad_ = H5T_STR_NULLPAD;
  hvl_t staged_[kRun];
  char* strings_[kRun];
  std::vector<char> fixed_;
  VarBytes one_;
};

}  // namespace

std::unique_ptr<ReadPath> vlen_read_path(const H5::DataSet& dset, std::string where) {
  return std::make_unique<VlenRead>(dset, std::move(where));
}

}  // namespace stoker::formats
