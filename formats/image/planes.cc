#include "formats/image/planes.h"

#include <array>
#include <cstddef>

#include "formats/image/cpu_kernels.h"

namespace stoker::formats {
namespace {

void row_to_planes_plain(const std::uint8_t* hwc, int width, int channels, std::uint8_t* const* planes, bool mirrored,
                         int from) {
  for (int ch = 0; ch < channels; ++ch) {
    std::uint8_t* plane = planes[ch];
    const std::uint8_t* s = hwc + ch;
    if (mirrored) {
      for (int x = from; x < width; ++x) plane[width - 1 - x] = s[static_cast<std::size_t>(x) * channels];
    } else {
      for (int x = from; x < width; ++x) plane[x] = s[static_cast<std::size_t>(x) * channels];
    }
  }
}

#if defined(STOKER_X86_DISPATCH)
// The byte shuffle that takes, from the `part`th 16 bytes of 16 RGB pixels, the values of channel
// `ch` that lie there, to their lanes (pixel j to lane j, or to lane 15 - j mirrored); 0x80 clears
// the other lanes, which the other two parts fill.
using Mask = std::array<std::int8_t, 16>;
constexpr Mask shuffle_mask(int ch, int part, bool mirrored) {
  Mask m{};
  for (int lane = 0; lane < 16; ++lane) {
    const int pixel = mirrored ? 15 - lane : lane;
    const int byte = 3 * pixel + ch - 16 * part;
    m[static_cast<std::size_t>(lane)] = byte >= 0 && byte < 16 ? static_cast<std::int8_t>(byte) : std::int8_t{-128};
  }
  return m;
}
constexpr std::array<std::array<std::array<Mask, 3>, 3>, 2> make_masks() {
  std::array<std::array<std::array<Mask, 3>, 3>, 2> out{};
  for (int m = 0; m < 2; ++m) {
    for (int ch = 0; ch < 3; ++ch) {
      for (int part = 0; part < 3; ++part) out[m][ch][part] = shuffle_mask(ch, part, m == 1);
    }
  }
  return out;
}
constexpr auto kMasks = make_masks();

// Sixteen pixels at a time; returns the pixels done.
__attribute__((target("ssse3"))) int rgb_row_to_planes_ssse3(const std::uint8_t* hwc, int width,
                                                             std::uint8_t* const* planes, bool mirrored) {
  const auto& masks = kMasks[mirrored ? 1 : 0];
  __m128i shuffles[3][3];
  for (int ch = 0; ch < 3; ++ch) {
    for (int part = 0; part < 3; ++part) {
      shuffles[ch][part] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(masks[ch][part].data()));
    }
  }
  int x = 0;
  for (; x + 16 <= width; x += 16) {
    const std::uint8_t* s = hwc + static_cast<std::size_t>(x) * 3;
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
    const int at = mirrored ? width - 16 - x : x;
    for (int ch = 0; ch < 3; ++ch) {
      const __m128i v =
          _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, shuffles[ch][0]), _mm_shuffle_epi8(b, shuffles[ch][1])),
                       _mm_shuffle_epi8(c, shuffles[ch][2]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(planes[ch] + at), v);
    }
  }
  return x;
}
#endif

}  // namespace

void row_to_planes(const std::uint8_t* hwc, int width, int channels, std::uint8_t* const* planes, bool mirrored) {
  int done = 0;
#if defined(STOKER_X86_DISPATCH)
  if (channels == 3 && use_ssse3()) done = rgb_row_to_planes_ssse3(hwc, width, planes, mirrored);
#endif
  row_to_planes_plain(hwc, width, channels, planes, mirrored, done);
}

}  // namespace stoker::formats
