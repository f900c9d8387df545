#include "tools/pack/pack_image.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "formats/image/image_decode.h"
#include "formats/image/jpeg_encode.h"
#include "stoker/error.h"

namespace stoker::tools {
namespace {

constexpr std::uint64_t kMaxFileBytes = std::uint64_t{1} << 30;  // stoker::kMaxSampleBytes

// A buffer up to this size is kept between files; a larger one, an outlier's, is given back when a
// file needs less than a quarter of it (as the loader's workers shed theirs, docs/pipeline.md): one
// 80-megapixel photo among thumbnails does not keep a thread's 240 MB for the rest of the pack.
constexpr std::size_t kKeepBytes = std::size_t{16} << 20;

template <class T>
void fit(std::vector<T>& v, std::size_t n) {
  if (v.capacity() * sizeof(T) > kKeepBytes && n * sizeof(T) < v.capacity() * sizeof(T) / 4) std::vector<T>().swap(v);
  v.resize(n);
}

// The decoder's row (an interlaced PNG's whole image) is sized by the decoder: an outlier's is given
// back before the next file, whose need is not known here.
void shed(std::vector<std::byte>& scratch) {
  if (scratch.capacity() > kKeepBytes) std::vector<std::byte>().swap(scratch);
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

}  // namespace

void read_whole_file(const std::string& path, const std::string& where, std::vector<std::byte>& out) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error::from_errno(errno, where);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) throw Error::from_errno(errno, where);
  if (!S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > kMaxFileBytes)
    throw Error(ErrorCode::dataset, fmt::format("{}: not a regular file of at most 1 GiB", where));
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error::from_errno(errno, where + ": reading");
    if (n == 0) throw Error(ErrorCode::io, fmt::format("{}: reading: the file shrank while it was read", where));
    done += static_cast<std::size_t>(n);
  }
}

std::span<const std::byte> ImagePreparer::prepare(std::span<const std::byte> file) {
  reencoded_ = false;
  const formats::ImageInfo info = formats::image_info(file, rules_.max_pixels);
  const int longer = std::max(info.width, info.height);
  if (rules_.max_side <= 0 || longer <= rules_.max_side) {
    if (rules_.decode) {
      // The whole image, unscaled: what the pipeline's `decode` reads (docs/pipeline.md).
      const formats::Region whole{0, 0, info.width, info.height};
      const formats::DecodePlan plan = formats::plan_decode(info, whole, 0, 0);
      fit(pixels_, static_cast<std::size_t>(plan.width) * plan.height * 3);
      shed(scratch_);
      formats::decode_region(file, info, whole, plan, pixels_.data(), scratch_);
    }
    return file;
  }
  // The longer side becomes max_side, the other keeps the aspect ratio (at least one pixel).
  const double scale = static_cast<double>(rules_.max_side) / longer;
  const int out_w = std::max(1, static_cast<int>(std::lround(info.width * scale)));
  const int out_h = std::max(1, static_cast<int>(std::lround(info.height * scale)));
  const formats::Region whole{0, 0, info.width, info.height};
  // A JPEG is decoded at the smallest DCT scale that still covers the output (as the pipeline does).
  const formats::DecodePlan plan = formats::plan_decode(info, whole, out_w, out_h);
  fit(pixels_, static_cast<std::size_t>(plan.width) * plan.height * 3);
  shed(scratch_);
  formats::decode_region(file, info, whole, plan, pixels_.data(), scratch_);
  fit(resized_, static_cast<std::size_t>(out_w) * out_h * 3);
  resizer_.run(reinterpret_cast<const std::uint8_t*>(pixels_.data()), plan.height, plan.width, 3,
               static_cast<std::size_t>(plan.width) * 3, resized_.data(), out_h, out_w);
  formats::encode_jpeg(resized_.data(), out_h, out_w, rules_.quality, encoded_);
  reencoded_ = true;
  return encoded_;
}

std::size_t ImagePreparer::buffer_bytes() const noexcept {
  return pixels_.capacity() + scratch_.capacity() + encoded_.capacity() + resized_.capacity();
}

}  // namespace stoker::tools
