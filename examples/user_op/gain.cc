// gain(lo, hi): each sample of a u8 image (any shape) multiplied by one factor drawn uniformly from
// [lo, hi] for that sample, rounded and clamped to [0, 255] — a random brightness, the way a
// user's own operation is written (stoker/pipeline.h). Its randomness is the sample's SampleRandom,
// drawn from (seed, epoch, sample index, field): the same in any worker.
#include <algorithm>
#include <cmath>
#include <span>

#include "stoker/error.h"
#include "stoker/pipeline.h"

namespace {

stoker::OpSpec gain_spec(const stoker::OpSpec& in, std::span<const double> args) {
  if (args.size() != 2 || !(args[0] >= 0) || !(args[1] >= args[0])) {
    throw stoker::Error(stoker::ErrorCode::invalid_option, "gain(lo, hi) takes two factors, 0 <= lo <= hi");
  }
  if (in.bytes || in.dtype != stoker::DType::u8) {
    throw stoker::Error(stoker::ErrorCode::invalid_option, "gain takes a decoded u8 image (decode first)");
  }
  return in;
}

void gain(const stoker::SampleIn& in, stoker::SampleOut& out, std::span<const double> args,
          stoker::SampleRandom& random) {
  const double factor = random.uniform(args[0], args[1]);
  std::byte* o = out.resize(in.dtype, in.shape);
  for (std::size_t i = 0; i < in.data.size(); ++i) {
    const double v = std::nearbyint(static_cast<double>(std::to_integer<unsigned>(in.data[i])) * factor);
    o[i] = static_cast<std::byte>(static_cast<unsigned>(std::clamp(v, 0.0, 255.0)));
  }
}

}  // namespace

STOKER_REGISTER_OP(gain, gain_spec, gain);
