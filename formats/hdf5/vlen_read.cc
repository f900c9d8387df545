// The vlen read path (formats/hdf5/read_path.h): a variable-length u8 dataset as a bytes field.
#include <fmt/format.h>

#include <cstring>
#include <iterator>

#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/read_path.h"
#include "stoker/error.h"

namespace stoker::formats {
namespace {

class VlenRead final : public ReadPath {
 public:
  VlenRead(const H5::DataSet& dset, std::string where)
      : dset_(dset), file_space_(dset_.getSpace()), where_(std::move(where)) {}
  Kind kind() const noexcept override { return Kind::vlen; }

  // In runs of at most 64 samples: no allocation per batch.
  void read(std::uint64_t start, std::uint64_t count, const FieldOut& out) override {
    while (count > 0) {
      const hsize_t n = std::min<std::uint64_t>(count, std::size(staged_));
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
  void read_run(std::uint64_t start, hsize_t n, VarBytes& out) {
    hsize_t offset = start, extent = n;
    file_space_.selectHyperslab(H5S_SELECT_SET, &extent, &offset);
    const H5::DataSpace mem_space(1, &extent);
    dset_.read(staged_, mem_type_, mem_space, file_space_);
    // HDF5 allocated each sample's bytes: give them back even when copying fails.
    struct Reclaim {
      const H5::DataType& type;
      const H5::DataSpace& space;
      hvl_t* buf;
      ~Reclaim() { H5Dvlen_reclaim(type.getId(), space.getId(), H5P_DEFAULT, buf); }
    } reclaim{mem_type_, mem_space, staged_};
    for (hsize_t k = 0; k < n; ++k) {
      if (staged_[k].len > kMaxSampleBytes) {
        throw Error(ErrorCode::dataset,
                    fmt::format("{}: sample {} holds {} bytes, more than a sample may ({} bytes, kMaxSampleBytes)",
                                where_, start + k, staged_[k].len, kMaxSampleBytes));
      }
      std::byte* dst = out.append(staged_[k].len);
      if (staged_[k].len) std::memcpy(dst, staged_[k].p, staged_[k].len);
    }
  }

  H5::DataSet dset_;
  H5::DataSpace file_space_;
  H5::VarLenType mem_type_{H5::PredType::NATIVE_UINT8};
  std::string where_;
  hvl_t staged_[64];
  VarBytes one_;
};

}  // namespace

std::unique_ptr<ReadPath> vlen_read_path(const H5::DataSet& dset, std::string where) {
  return std::make_unique<VlenRead>(dset, std::move(where));
}

}  // namespace stoker::formats
