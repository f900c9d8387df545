// The hdf5 read path (formats/hdf5/read_path.h): H5Dread of one hyperslab per run of samples.
#include <fmt/format.h>

#include "formats/hdf5/hdf5_errors.h"
#include "formats/hdf5/read_path.h"

namespace stoker::formats {
namespace {

class Hdf5Read final : public ReadPath {
 public:
  explicit Hdf5Read(ArrayDataset a) : a_(std::move(a)), file_space_(a_.dset.getSpace()) {}
  Kind kind() const noexcept override { return Kind::hdf5; }
  void read(std::uint64_t start, std::uint64_t count, const FieldOut& out) override {
    std::vector<hsize_t> offset(a_.dims.size(), 0), extent = a_.dims;
    offset[0] = start;
    extent[0] = count;
    const auto context = [&] { return fmt::format("{}: reading samples {}..{}", a_.where, start, start + count - 1); };
    hdf5_call(context, [&] {
      file_space_.selectHyperslab(H5S_SELECT_SET, extent.data(), offset.data());
      const H5::DataSpace mem_space(static_cast<int>(extent.size()), extent.data());
      a_.dset.read(out.fixed, a_.mem_type, mem_space, file_space_);
    });
  }

 private:
  ArrayDataset a_;
  H5::DataSpace file_space_;
};

}  // namespace

std::unique_ptr<ReadPath> hdf5_read_path(ArrayDataset array) { return std::make_unique<Hdf5Read>(std::move(array)); }

}  // namespace stoker::formats
