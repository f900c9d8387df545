// Image bytes through decode: the full image, a region with DCT scaling, and the pipeline that
// crops and resizes; an image or an Error, never a crash or an overrun.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "formats/image/image_decode.h"
#include "loader/pipeline/pipeline.h"
#include "stoker/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static stoker::detail::SamplePipelines pipeline = [] {
    stoker::Schema s;
    s.num_samples = 1;
    s.fields = {stoker::Field::bytes_field("x")};
    return stoker::detail::SamplePipelines("x=decode,random_resized_crop(8,12),flip,to_chw", s, 7, {});
  }();
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const auto info = stoker::formats::image_info(bytes, stoker::kDefaultMaxImagePixels);
    if (static_cast<std::uint64_t>(info.width) * static_cast<std::uint64_t>(info.height) > (1u << 22)) return 0;
    std::vector<std::byte> out, scratch;
    const stoker::formats::Region whole{0, 0, info.width, info.height};
    auto plan = stoker::formats::plan_decode(info, whole, 0, 0);
    if (plan.width != info.width || plan.height != info.height) __builtin_trap();
    out.resize(static_cast<std::size_t>(plan.width) * static_cast<std::size_t>(plan.height) * 3);
    stoker::formats::decode_region(bytes, info, whole, plan, out.data(), scratch);
    const stoker::formats::Region half{info.width / 4, info.height / 4, (info.width + 1) / 2, (info.height + 1) / 2};
    plan = stoker::formats::plan_decode(info, half, 1, 1);
    if (plan.width <= 0 || plan.height <= 0 || plan.width > half.width || plan.height > half.height) __builtin_trap();
    out.resize(static_cast<std::size_t>(plan.width) * static_cast<std::size_t>(plan.height) * 3);
    stoker::formats::decode_region(bytes, info, half, plan, out.data(), scratch);
    std::byte result[8 * 12 * 3];
    pipeline.run(0, bytes, 0, 0, result);
  } catch (const stoker::Error&) {
  }
  return 0;
}
