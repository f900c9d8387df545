// What stoker-pack stores of one file: its bytes, read whole and checked to be an image the
// loader's `decode` reads (JPEG or PNG, within the pixel limit), byte for byte; or, with a largest
// side (--max-side N), an image larger than that decoded, resized (antialiased bilinear, the
// pipeline's resize) so that its longer side is N, and re-encoded as a JPEG of --quality Q.
// Images within the largest side are stored as they are: re-encoding them would only lose quality.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "formats/image/resize.h"

namespace stoker::tools {

struct ImageRules {
  int max_side = 0;  // 0: store every file as it is
  int quality = 90;
  std::uint64_t max_pixels = 0;  // the loader's Options::max_image_pixels
  // Decode every image whole, as the loader's `decode` does (--verify=decode), so that one whose
  // data is corrupt past a sound header is refused here rather than by the training run.
  bool decode = false;
};

// The file's bytes, whole, into `out`; errors name `where`. Refuses what is not a regular file of
// at most 1 GiB (a sample's limit).
void read_whole_file(const std::string& path, const std::string& where, std::vector<std::byte>& out);

// One per thread: keeps its decode and resize buffers between files.
class ImagePreparer {
 public:
  explicit ImagePreparer(const ImageRules& rules) : rules_(rules) {}
  // What is stored for the image `file`: `file` itself (returns it), or its re-encoding (in a
  // buffer of this preparer, valid until the next call). Throws stoker::Error for bytes that are not
  // an image the loader decodes, or a corrupt one that a re-encode (or rules.decode) had to decode.
  std::span<const std::byte> prepare(std::span<const std::byte> file);
  // Whether the last prepare() re-encoded.
  bool reencoded() const noexcept { return reencoded_; }
  // The bytes its buffers hold now. Those an outlier grew past 16 MiB are given back by the next
  // file that needs less than a quarter of them: a thread's memory follows the files it reads now.
  std::size_t buffer_bytes() const noexcept;

 private:
  ImageRules rules_;
  formats::Resizer resizer_;
  std::vector<std::byte> pixels_, scratch_, encoded_;
  std::vector<std::uint8_t> resized_;
  bool reencoded_ = false;
};

}  // namespace stoker::tools
