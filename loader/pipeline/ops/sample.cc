// The sample types of stoker/pipeline.h: an operation's output buffer and its random numbers.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "base/scratch.h"
#include "base/splitmix64.h"
#include "stoker/error.h"
#include "stoker/pipeline.h"
#include "stoker/schema.h"

namespace stoker {

std::byte* SampleOut::resize(DType dtype, std::span<const std::int64_t> shape) {
  std::uint64_t bytes = dtype_size(dtype);
  for (std::int64_t d : shape) {
    if (d < 0 || (d > 0 && static_cast<std::uint64_t>(d) > kMaxSampleBytes / std::max<std::uint64_t>(bytes, 1))) {
      throw Error(ErrorCode::dataset,
                  fmt::format("an output of shape [{}] is more than a sample may hold ({} bytes, kMaxSampleBytes)",
                              fmt::join(shape, ","), kMaxSampleBytes));
    }
    bytes *= static_cast<std::uint64_t>(d);
  }
  dtype_ = dtype;
  shape_.assign(shape.begin(), shape.end());
  size_ = bytes;
  if (target_ && bytes != target_bytes_) target_ = nullptr;  // not the declared output: the caller says so
  if (target_) return target_;
  // Grown for an outlier, given back after it (base/scratch.h).
  if (detail::scratch_is_outlier(buffer_.size(), bytes)) std::vector<std::byte>().swap(buffer_);
  if (buffer_.size() < bytes) buffer_.resize(bytes);
  return buffer_.data();
}

std::uint64_t SampleRandom::next() noexcept { return detail::splitmix64_mix(state_ += 0x9e3779b97f4a7c15ull); }

double SampleRandom::uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::int64_t SampleRandom::integer(std::int64_t lo, std::int64_t hi) noexcept {
  if (hi <= lo) return lo;
  const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<std::int64_t>(static_cast<double>(span) * uniform());
}

}  // namespace stoker
